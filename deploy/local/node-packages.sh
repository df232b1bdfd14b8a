#!/usr/bin/env bash
# Installs the Debian packages the real nodes (tier L4, `localcluster up --tier real`) need. Idempotent:
# a warm run only checks dpkg and exits. Needs root (apt-get).
#   containerd, runc, containernetworking-plugins  the container runtime and pod network
#   debootstrap                                     the images' Debian base (built, never pulled)
#   iproute2, iptables                              the sandbox's network; the machine record (read only)
#   gcc, libc6-dev                                  the pause image's static binary
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins debootstrap iptables iproute2 gcc libc6-dev)
missing=()
for pkg in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "node-packages.sh: need root to apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "==> apt-get install ${missing[*]} (Debian packages for the real node)"
export DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes  # no "delaying package configuration" notes
apt-get update -qq
# policy-rc.d: the packages' maintainer scripts must not start a machine-wide containerd.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
fi
trap 'if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
