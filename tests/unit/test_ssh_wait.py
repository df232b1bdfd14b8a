"""The launcher's wait-for-workers gate: what render puts in the pod, what status makes of a timeout, and
the script itself, run with /bin/sh against a fake `ssh` on PATH."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from render import Config, ValidationError, render, status
from render import names as n
from render.children.sshwait import SCRIPT
from render.parse import parse_mpijob
from render.phases import gate_wait
from tests.unit.render_helpers import by_kind, conds, job, launcher, launcher_pod, observed, ts, worker

CFG = Config()


def errors_of(obj: dict) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_mpijob(obj)
    return info.value.lines()


def launcher_spec(children: list[dict]) -> dict:
    return by_kind(children, "Job")[0]["spec"]["template"]["spec"]


def gate(children: list[dict]) -> dict | None:
    spec = launcher_spec(children)
    found = [c for c in spec.get("initContainers") or [] if c["name"] == n.WAIT_CONTAINER]
    return found[0] if found else None


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


# -- render -----------------------------------------------------------------------------------------
def test_gate_is_the_launchers_image_user_mounts_and_resources():
    j = job()
    main = j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    main["resources"] = {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    main["securityContext"] = {"runAsUser": 1000}
    main["env"] = [{"name": "USER_VAR", "value": "x"}]
    j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["initContainers"] = [
        {"name": "fetch-data", "image": "busybox"}
    ]
    children = render(j, observed(), CFG)
    spec = launcher_spec(children)
    ours, theirs = gate(children), spec["containers"][0]
    assert ours is not None
    # Last, after the user's init containers; runs the script from the ConfigMap mount.
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-data", n.WAIT_CONTAINER]
    assert ours["command"] == ["/bin/sh", "/etc/mpi/wait_for_workers.sh"]
    for key in ("image", "securityContext", "resources", "volumeMounts"):
        assert ours[key] == theirs[key], key
    # Equal requests: the pod's effective requests (max of init, sum of containers) do not change.
    assert ours["resources"] is not theirs["resources"]  # copies, not shared (YAML output has no anchors)
    env = env_of(ours)
    assert env["USER_VAR"] == "x" and env["K_MPI_JOB_ROLE"] == "launcher"
    assert env["MPIJOB_WAIT_TIMEOUT"] == "300" and env["MPIJOB_WAIT_SELF"] == ""
    assert env["MPIJOB_WAIT_DISCOVER"] == "" and env["MPIJOB_WAIT_LAUNCHER"] == "pi-launcher.pi.ns.svc"
    cm = by_kind(children, "ConfigMap")[0]
    assert cm["data"][n.WAIT_SCRIPT_KEY] == SCRIPT
    items = [i for v in spec["volumes"] if "configMap" in v for i in v["configMap"]["items"]]
    assert {"key": n.WAIT_SCRIPT_KEY, "path": n.WAIT_SCRIPT_KEY, "mode": 0o555} in items


def test_annotation_sets_the_timeout_and_zero_turns_the_gate_off():
    j = job()
    j["metadata"]["annotations"] = {n.SSH_WAIT_ANNOTATION: "45"}
    assert env_of(gate(render(j, observed(), CFG)))["MPIJOB_WAIT_TIMEOUT"] == "45"
    j["metadata"]["annotations"] = {n.SSH_WAIT_ANNOTATION: "0"}
    children = render(j, observed(), CFG)
    assert gate(children) is None and "initContainers" not in launcher_spec(children)


def test_run_launcher_as_worker_skips_the_launcher_and_elastic_reads_discover_hosts():
    j = job(runLauncherAsWorker=True)
    assert env_of(gate(render(j, observed(), CFG)))["MPIJOB_WAIT_SELF"] == "pi-launcher"
    j = job()
    main = j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    main["command"] = ["horovodrun"]
    main["args"] = ["-np", "2", "--min-np", "1", "--host-discovery-script", "/etc/mpi/discover_hosts.sh"]
    assert env_of(gate(render(j, observed(), CFG)))["MPIJOB_WAIT_DISCOVER"] == "/etc/mpi/discover_hosts.sh"


@pytest.mark.parametrize("value", ["-1", "1.5", "ten", "", " 5", "2147483648", "٣"])
def test_bad_timeout_annotation_is_a_validation_error_with_the_path(value):
    j = job()
    j["metadata"]["annotations"] = {n.SSH_WAIT_ANNOTATION: value}
    assert [line.split(":")[0] for line in errors_of(j)] == [f"metadata.annotations[{n.SSH_WAIT_ANNOTATION}]"]


def test_the_gates_name_is_reserved_in_the_launcher_template():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["initContainers"] = [
        {"name": n.WAIT_CONTAINER, "image": "x"}
    ]
    assert [line.split(": ")[0] for line in errors_of(j)] == [
        "spec.mpiReplicaSpecs[Launcher].template.spec.initContainers[0].name"
    ]


# -- status -----------------------------------------------------------------------------------------
def waiting_launcher_pod(exit_code: int, message: str = "", *, last: bool = True) -> dict:
    term = {"exitCode": exit_code, "reason": "Error", "message": message}
    cs = {"name": n.WAIT_CONTAINER, "restartCount": 1}
    if last:
        cs |= {"lastState": {"terminated": term}, "state": {"running": {}}}
    else:
        cs |= {"state": {"terminated": term}}
    return launcher_pod("a1", "Pending", ts(100), initContainerStatuses=[cs])


def test_a_timed_out_gate_fails_the_job_with_its_message_and_suspends_the_launcher():
    j = job()
    j["status"] = {"startTime": ts(400)}
    msg = "workers not reachable over SSH after 300s: pi-worker-1.pi.ns.svc (no DNS record)"
    for last in (True, False):  # restarted in place (OnFailure) or the pod failed (Never)
        live = [worker(0), worker(1, "Pending"), launcher(active=1), waiting_launcher_pod(69, msg, last=last)]
        st = status(j, observed(*live), CFG)
        failed = conds(st)["Failed"]
        assert failed["status"] == "True" and failed["reason"] == "WorkersUnreachable"
        assert failed["message"].endswith(f"launcher pod pi-launcher-a1: {msg}"), failed
        assert st["completionTime"]
        j2 = dict(j, status=st)
        job_child = by_kind(render(j2, observed(*live), CFG), "Job")[0]
        assert job_child["spec"]["suspend"] is True


def test_other_gate_exits_are_left_to_the_job_and_kubelet():
    j = job()
    j["status"] = {"startTime": ts(400)}
    live = [worker(0), worker(1), launcher(active=1), waiting_launcher_pod(137)]
    assert "Failed" not in conds(status(j, observed(*live), CFG))


# -- the script, for real ---------------------------------------------------------------------------
FAKE_SSH = """#!/bin/sh
# args: -o .. -o .. -o .. HOST true ; answers from $FAKE_DIR/<host> (a count of failures, then an error)
for last; do :; done
host=$(eval "echo \\${$(($# - 1))}")
state="$FAKE_DIR/$host"
echo "$host" >>"$FAKE_DIR/calls"
[ -f "$state" ] || exit 0
read -r left err <"$state"
if [ "$left" -gt 0 ]; then
  echo "$((left - 1)) $err" >"$state"
  echo "ssh: $err" >&2
  exit 255
fi
exit 0
"""


LAUNCHER = "pi-launcher.pi.ns.svc"


def checked(d: Path) -> list[str]:
    """Hosts the script ssh-ed to, in order, without the launcher's own name check."""
    return [h for h in (d / "calls").read_text().split() if h != LAUNCHER]


def run_script(
    tmp_path: Path, hosts: str, fails: dict[str, tuple[int, str]], **env: str
) -> tuple[int, str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    for host, (count, err) in fails.items():
        (tmp_path / host).write_text(f"{count} {err}\n")
    (tmp_path / "hostfile").write_text(hosts)
    (tmp_path / "script.sh").write_text(SCRIPT)
    full = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "MPIJOB_WAIT_TIMEOUT": "30",
        "MPIJOB_WAIT_HOSTFILE": str(tmp_path / "hostfile"),
        "MPIJOB_WAIT_DISCOVER": "",
        "MPIJOB_WAIT_SELF": "",
        "MPIJOB_WAIT_LAUNCHER": LAUNCHER,
        "MPIJOB_WAIT_TERMINATION_LOG": str(tmp_path / "termination-log"),
        **env,
    }
    out = subprocess.run(["/bin/sh", str(tmp_path / "script.sh")], env=full, capture_output=True, text=True)
    term = tmp_path / "termination-log"
    return out.returncode, out.stdout + out.stderr, term.read_text() if term.exists() else ""


def test_script_waits_until_every_host_answers(tmp_path):
    hosts = "w-0.pi.ns.svc slots=2\nw-1.pi.ns.svc slots=2\n"
    code, out, term = run_script(
        tmp_path,
        hosts,
        {"w-1.pi.ns.svc": (2, "Could not resolve hostname w-1.pi.ns.svc: Name or service not known")},
    )
    assert code == 0, out
    assert "2 host(s) reachable" in out
    # The termination message says how long it waited (two failed rounds, a second apart), in a form
    # the operator's phase metrics read.
    assert re.fullmatch(r"2 host\(s\) reachable over SSH after [0-9]+\.[0-9]{3}s", term), term
    passed = {"terminated": {"exitCode": 0, "message": term}}
    pod = {"status": {"initContainerStatuses": [{"name": n.WAIT_CONTAINER, "state": passed}]}}
    waited = gate_wait(pod)
    assert waited is not None and 1.9 <= waited < 10, term
    calls = checked(tmp_path)
    # w-0 is checked once; w-1 until it answers (2 failures, then success).
    assert calls.count("w-0.pi.ns.svc") == 1 and calls.count("w-1.pi.ns.svc") == 3


def test_script_times_out_naming_each_host_and_why(tmp_path):
    hosts = "a.pi.ns.svc:1\nb.pi.ns.svc:1\nc.pi.ns.svc:1\nd.pi.ns.svc:1\n"
    fails = {
        "a.pi.ns.svc": (99, "Could not resolve hostname a.pi.ns.svc: Temporary failure in name resolution"),
        "b.pi.ns.svc": (99, "connect to host b.pi.ns.svc port 2222: Connection refused"),
        "c.pi.ns.svc": (99, "Permission denied (publickey)."),
    }
    code, out, term = run_script(tmp_path, hosts, fails, MPIJOB_WAIT_TIMEOUT="0")
    assert code == n.WAIT_UNREACHABLE_EXIT, out
    # d answered; the others are named with the reason ssh gave. (cut ends the line; kubelet keeps it.)
    assert term.rstrip("\n") == (
        "workers not reachable over SSH after 0s: a.pi.ns.svc (no DNS record), "
        "b.pi.ns.svc (connection refused), c.pi.ns.svc (authentication failed)"
    ), term


def test_script_waits_for_the_launchers_own_dns_record(tmp_path):
    # hydra's proxies connect back to the launcher by name. A refused connection means the name exists.
    dns = f"Could not resolve hostname {LAUNCHER}: Name or service not known"
    code, out, _ = run_script(tmp_path, "w-0.pi.ns.svc:1\n", {LAUNCHER: (2, dns)})
    assert code == 0, out
    assert (tmp_path / "calls").read_text().split().count(LAUNCHER) == 3
    d = tmp_path / "refused"
    d.mkdir()
    code, out, _ = run_script(d, "w-0.pi.ns.svc:1\n", {LAUNCHER: (1, "connect to host: Connection refused")})
    assert code == 0 and (d / "calls").read_text().split().count(LAUNCHER) == 1, out
    d = tmp_path / "never"
    d.mkdir()
    code, _, term = run_script(d, "w-0.pi.ns.svc:1\n", {LAUNCHER: (99, dns)}, MPIJOB_WAIT_TIMEOUT="0")
    assert code == n.WAIT_UNREACHABLE_EXIT and term.startswith(
        f"workers not reachable over SSH after 0s: {LAUNCHER} (no DNS record)"
    ), term


def test_script_skips_the_launcher_itself(tmp_path):
    hosts = "pi-launcher slots=1\nw-0.pi.ns.svc slots=1\n"
    code, out, _ = run_script(tmp_path, hosts, {}, MPIJOB_WAIT_SELF="pi-launcher")
    assert code == 0, out
    assert checked(tmp_path) == ["w-0.pi.ns.svc"]


def test_script_elastic_needs_at_least_one_listed_host(tmp_path):
    empty, listed = tmp_path / "empty", tmp_path / "listed"
    for d, lines in ((empty, ""), (listed, "echo pi-launcher.pi.ns.svc:1\necho w-0.pi.ns.svc:1\n")):
        d.mkdir()
        (d / "discover_hosts.sh").write_text("#!/bin/sh\n" + lines)
    script = str(empty / "discover_hosts.sh")
    code, _, term = run_script(empty, "x\n", {}, MPIJOB_WAIT_DISCOVER=script, MPIJOB_WAIT_TIMEOUT="0")
    assert code == n.WAIT_UNREACHABLE_EXIT and f"no host listed in {script}" in term
    # The hostfile is not read in elastic mode; the launcher's own FQDN is skipped.
    script = str(listed / "discover_hosts.sh")
    code, out, _ = run_script(listed, "x\n", {}, MPIJOB_WAIT_DISCOVER=script, MPIJOB_WAIT_SELF="pi-launcher")
    assert code == 0, out
    assert checked(listed) == ["w-0.pi.ns.svc"]


def test_exit_code_in_script_matches_status():
    assert f"exit {n.WAIT_UNREACHABLE_EXIT}\n" in SCRIPT
