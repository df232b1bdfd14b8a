"""The launcher's gate: an init container that lets mpirun start only once every host can be reached.

It runs the launcher's own image with the launcher's env, mounts, security context and resources (so no
extra image, the same user and keys as mpirun, and the pod's effective requests unchanged: an init
container counts as max(init, sum of containers)), and needs only what an MPI-over-SSH image has: a
POSIX shell and an ssh client. It checks each host with the same `ssh HOST true` mpirun's launcher
would run, so the image's ssh config (port, host-key policy) applies as it will for mpirun. After the
timeout it exits with names.WAIT_UNREACHABLE_EXIT and a termination message naming each host and why; status()
turns that into `Failed/WorkersUnreachable`.
"""

from __future__ import annotations

from typing import Any

from render import names
from render.api import MPIJob
from render.children.common import env_var
from render.jsonutil import clone

DEFAULT_TIMEOUT_SECONDS = 300
# Elastic jobs (Horovod) run on whatever discover_hosts.sh lists: wait for those, at least one.
ELASTIC_MARKERS = (names.DISCOVER_HOSTS_KEY, "host-discovery-script")
COPIED_FIELDS = ("image", "imagePullPolicy", "envFrom", "volumeMounts", "securityContext", "resources")

# POSIX sh: it runs in the user's image. It lives in the ConfigMap (`wait_for_workers.sh`), settings in
# the env. `hosts` strips slots (`h slots=N`, `h:N`).
SCRIPT = r"""#!/bin/sh
# The MPIJob operator's gate: start mpirun only once every host accepts ssh (see the operator's README).
set -u
timeout=$MPIJOB_WAIT_TIMEOUT
start=$(date +%s)
hosts() {
  if [ -n "$MPIJOB_WAIT_DISCOVER" ]; then sh "$MPIJOB_WAIT_DISCOVER"; else cat "$MPIJOB_WAIT_HOSTFILE"; fi |
    sed -e 's/[:[:space:]].*//' -e '/^$/d'
}
probe() { ssh -o BatchMode=yes -o ConnectTimeout="$1" -o ConnectionAttempts=1 "$2" true 2>&1 </dev/null; }
ok=" "
named=""
rounds=0
while :; do
  report=""
  listed=0
  # hydra's proxies (MPICH, Intel MPI) connect back to the launcher by name: wait for its DNS record
  # (this name is not in /etc/hosts, so it resolves only through cluster DNS). Any answer but a
  # resolver error means the name exists; the launcher runs no sshd.
  if [ -z "$named" ]; then
    err=$(probe 2 "$MPIJOB_WAIT_LAUNCHER")
    case "$err" in
      *"resolve hostname"* | *"not known"*) report=", $MPIJOB_WAIT_LAUNCHER (no DNS record)" ;;
      *) named=1 ;;
    esac
  fi
  for h in $(hosts); do
    case "$h" in "$MPIJOB_WAIT_SELF" | "$MPIJOB_WAIT_SELF".*) continue ;; esac
    listed=$((listed + 1))
    case "$ok" in *" $h "*) continue ;; esac
    if err=$(probe 5 "$h"); then
      ok="$ok$h "
      continue
    fi
    case "$err" in
      *"resolve hostname"* | *"not known"*) why="no DNS record" ;;
      *"refused"*) why="connection refused" ;;
      *"Permission denied"*) why="authentication failed" ;;
      *"Host key verification failed"*) why="host key verification failed" ;;
      *"timed out"*) why="connection timed out" ;;
      *) why=$(printf '%s\n' "$err" | tail -n 1) ;;
    esac
    report="$report, $h ($why)"
  done
  if [ -z "$report" ] && { [ -z "$MPIJOB_WAIT_DISCOVER" ] || [ "$listed" -gt 0 ]; }; then
    echo "wait-for-workers: $listed host(s) reachable over SSH after $(($(date +%s) - start))s"
    exit 0
  fi
  if [ $(($(date +%s) - start)) -ge "$timeout" ]; then
    [ -n "$report" ] || report=", no host listed in $MPIJOB_WAIT_DISCOVER"
    msg="workers not reachable over SSH after ${timeout}s: ${report#, }"
    echo "wait-for-workers: $msg" >&2
    printf '%s' "$msg" | cut -c 1-3500 >"${MPIJOB_WAIT_TERMINATION_LOG:-/dev/termination-log}"
    exit 69
  fi
  rounds=$((rounds + 1))
  [ $((rounds % 10)) -ne 0 ] || echo "wait-for-workers: waiting for ${report#, }"
  sleep 1
done
"""


def timeout_seconds(job: MPIJob) -> int:
    """The gate's timeout from the annotation (validated in render.validation), else the default."""
    value = job.annotations.get(names.SSH_WAIT_ANNOTATION)
    return int(value) if value is not None else DEFAULT_TIMEOUT_SECONDS


def discovers_hosts(job: MPIJob) -> bool:
    """A launcher container runs host discovery (Horovod elastic): it reads discover_hosts.sh as it runs."""
    containers = (job.launcher.template.get("spec") or {}).get("containers") or []
    return any(_elastic(c) for c in containers if isinstance(c, dict))


def _elastic(container: dict[str, Any]) -> bool:
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    return any(marker in str(w) for w in words for marker in ELASTIC_MARKERS)


def wait_container(job: MPIJob, launcher: dict[str, Any]) -> dict[str, Any] | None:
    """The init container for the launcher's decorated main container, or None when turned off."""
    timeout = timeout_seconds(job)
    if timeout == 0:
        return None
    discover = names.CONFIG_MOUNT_PATH + "/" + names.DISCOVER_HOSTS_KEY if _elastic(launcher) else ""
    env = [
        *clone(launcher.get("env") or []),
        env_var("MPIJOB_WAIT_TIMEOUT", str(timeout)),
        env_var("MPIJOB_WAIT_HOSTFILE", names.HOSTFILE_PATH),
        env_var("MPIJOB_WAIT_DISCOVER", discover),
        # With runLauncherAsWorker the launcher is a host too, but mpirun starts its ranks without ssh.
        env_var("MPIJOB_WAIT_SELF", names.launcher_name(job.name) if job.run_launcher_as_worker else ""),
        env_var("MPIJOB_WAIT_LAUNCHER", f"{names.launcher_name(job.name)}.{job.name}.{job.namespace}.svc"),
    ]
    out: dict[str, Any] = {"name": names.WAIT_CONTAINER}
    for key in COPIED_FIELDS:
        if key in launcher:
            out[key] = clone(launcher[key])
    out["env"] = env
    out["command"] = ["/bin/sh", names.CONFIG_MOUNT_PATH + "/" + names.WAIT_SCRIPT_KEY]
    out["terminationMessagePolicy"] = "FallbackToLogsOnError"  # the log tail if the file is not writable
    return out
