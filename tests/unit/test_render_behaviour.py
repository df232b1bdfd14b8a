"""render() behaviours the goldens show once, checked across rounds and edge cases."""

import base64
import subprocess
import sys

from render import Config, render, status
from render.quantity import format_quantity, parse
from tests.unit.render_helpers import by_kind, job, launcher, names_of, observed, owner, ts, worker

CFG = Config()


def test_failed_worker_is_deleted_then_recreated():
    j = job()
    j["status"] = status(j, observed(worker(0), worker(1)), CFG)
    gone = worker(1, "Failed", containerStatuses=[{"name": "w", "state": {"terminated": {"exitCode": 1}}}])
    gone["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = ts(10)  # back-off over
    round1 = render(j, observed(worker(0), gone, launcher()), CFG)
    assert names_of(round1, "Pod") == ["pi-worker-0"]  # the differ deletes pi-worker-1
    round2 = render(j, observed(worker(0), launcher()), CFG)
    assert names_of(round2, "Pod") == ["pi-worker-0", "pi-worker-1"]  # and creates it again


def test_discover_hosts_sorts_numerically_and_lists_running_only():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 12
    pods = [worker(i) for i in range(12)]
    pods[3] = worker(3, "Pending")
    cm = by_kind(render(j, observed(*pods), CFG), "ConfigMap")[0]
    listed = [line.split()[1].split(".")[0] for line in cm["data"]["discover_hosts.sh"].splitlines()[1:]]
    assert listed == [f"pi-worker-{i}" for i in range(12) if i != 3]
    assert cm["data"]["hostfile"].count("\n") == 12


def test_ssh_secret_from_live_then_fresh_then_none():
    live = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pi-ssh", "namespace": "ns", "ownerReferences": owner()},
        "data": {"ssh-privatekey": "bGl2ZQ==", "ssh-publickey": "cHVi", "extra": "eA=="},
    }
    secret = by_kind(render(job(), observed(live), CFG), "Secret")[0]
    assert secret["data"] == {"ssh-privatekey": "bGl2ZQ==", "ssh-publickey": "cHVi"}
    assert secret["type"] == "kubernetes.io/ssh-auth"
    fresh = by_kind(render(job(), observed(), CFG), "Secret")[0]
    assert base64.b64decode(fresh["data"]["ssh-publickey"]).decode() == "ecdsa-sha2-nistp521 AAAAT\n"
    foreign = {**live, "metadata": {"name": "pi-ssh", "namespace": "ns"}}
    assert by_kind(render(job(), observed(foreign), CFG), "Secret")[0]["data"] != live["data"]
    assert by_kind(render(job(), observed(key=None), CFG), "Secret") == []


def test_wait_for_workers_ready():
    j = job(launcherCreationPolicy="WaitForWorkersReady")
    assert by_kind(render(j, observed(worker(0), worker(1, ready=False)), CFG), "Job") == []
    assert by_kind(render(j, observed(worker(0), worker(1)), CFG), "Job")[0]["spec"]["suspend"] is False
    # an existing suspended launcher stays suspended until the workers are Ready (#615) ...
    held = render(j, observed(launcher(suspend=True), worker(0, "Pending")), CFG)
    assert by_kind(held, "Job")[0]["spec"]["suspend"] is True
    # ... but a launcher that already runs is never suspended because a worker became unready
    running = render(j, observed(launcher(suspend=False), worker(0), worker(1, ready=False)), CFG)
    assert by_kind(running, "Job")[0]["spec"]["suspend"] is False


def test_launcher_job_spec():
    j = job(runPolicy={"backoffLimit": 3, "ttlSecondsAfterFinished": 10, "activeDeadlineSeconds": 100})
    spec = by_kind(render(j, observed(), CFG), "Job")[0]["spec"]
    assert spec["backoffLimit"] == 3 and spec["podReplacementPolicy"] == "Failed"
    assert "ttlSecondsAfterFinished" not in spec and "activeDeadlineSeconds" not in spec


def test_deadline_suspends_launcher_and_cleans_up():
    j = job(runPolicy={"activeDeadlineSeconds": 60})
    j["status"] = {"startTime": ts(120), "conditions": []}
    children = render(j, observed(worker(0), worker(1), launcher()), Config(gang_scheduling="volcano"))
    assert by_kind(children, "Job")[0]["spec"]["suspend"] is True
    assert by_kind(children, "Pod") == [] and by_kind(children, "PodGroup") == []


def test_clean_pod_policy_none_keeps_but_never_creates_after_finish():
    j = job(runPolicy={"cleanPodPolicy": "None"})
    done = launcher(conditions=[{"type": "Complete", "status": "True"}])
    assert names_of(render(j, observed(worker(1), done), CFG), "Pod") == ["pi-worker-1"]


def test_podgroup_min_member_and_resources():
    volcano = Config(gang_scheduling="volcano")
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"cpu": "1", "nvidia.com/gpu": "1"},
    }
    pg = by_kind(render(j, observed(), volcano), "PodGroup")[0]
    assert pg["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert pg["spec"] == {
        "minMember": 3,
        "minResources": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"},
    }
    j["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    assert by_kind(render(j, observed(), volcano), "PodGroup")[0]["spec"]["minMember"] == 2  # #608
    j["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 1}}
    pg = by_kind(render(j, observed(), Config(gang_scheduling="sched")), "PodGroup")[0]
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and pg["spec"]["minMember"] == 1
    assert all(
        p["spec"]["schedulerName"] == "sched"
        for p in by_kind(render(j, observed(), Config("", "sched")), "Pod")
    )


def test_launcher_as_worker_without_worker_spec():
    j = job(runLauncherAsWorker=True)
    del j["spec"]["mpiReplicaSpecs"]["Worker"]
    children = render(j, observed(), Config(gang_scheduling="volcano"))
    assert by_kind(children, "Pod") == []
    assert by_kind(children, "ConfigMap")[0]["data"]["hostfile"] == "pi-launcher slots=1\n"
    assert by_kind(children, "PodGroup")[0]["spec"]["minMember"] == 1
    env = by_kind(children, "Job")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert not any(e["name"].startswith("NVIDIA_") for e in env)


def test_user_env_comes_first_and_null_fields_are_absent():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "OMPI_MCA_orte_set_default_slots", "value": "9"}
    ]
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["dnsConfig"] = None
    children = render(j, observed(), CFG)
    env = by_kind(children, "Job")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    slots = [e.get("value") for e in env if e["name"] == "OMPI_MCA_orte_set_default_slots"]
    assert slots == ["9", "1"]  # ours last, so ours wins
    assert [e["name"] for e in env if e["name"].startswith("PRTE_")] == [
        "PRTE_MCA_prte_default_hostfile",
        "PRTE_MCA_prte_keep_fqdn_hostnames",
        "PRTE_MCA_prte_set_default_slots",
        "PRTE_MCA_plm_ssh_args",
    ]
    pod = by_kind(children, "Pod")[0]
    assert pod["spec"]["dnsConfig"] == {"searches": ["pi.ns.svc.cluster.local"]}
    assert pod["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]


def test_quantities():
    assert parse("1Gi") == (1024**3, True)
    assert format_quantity(parse("500m")[0] * 3, False) == "1500m"
    assert format_quantity(parse("512Mi")[0] * 2, True) == "1Gi"
    assert format_quantity(parse("1.5G")[0], False) == "1500M"
    assert format_quantity(parse("2e3")[0], False) == "2k"


def test_render_package_is_pure():
    code = (
        "import importlib, pkgutil, sys, render; "
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(render.__path__, 'render.')]; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'reconcile', 'urllib3')]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_finished_job_keeps_its_last_discover_hosts_while_workers_are_cleaned_up():
    j = job()
    done = launcher(conditions=[{"type": "Complete", "status": "True"}], succeeded=1, completionTime=ts(0))
    running = render(j, observed(worker(0), worker(1), launcher()), CFG)
    live_cm = by_kind(running, "ConfigMap")[0]
    assert "pi-worker-1" in live_cm["data"]["discover_hosts.sh"]
    # The launcher finished and the cleanup (cleanPodPolicy Running) already removed one worker.
    after = render(j, observed(worker(0), live_cm, done), CFG)
    cm = by_kind(after, "ConfigMap")[0]
    assert cm["data"] == live_cm["data"]  # no write spent on a script nobody reads any more
    assert names_of(after, "Pod") == []  # the remaining Running worker is still cleaned up
    # A running job keeps tracking its running workers.
    live = render(j, observed(worker(0), live_cm, launcher()), CFG)
    assert "pi-worker-1" not in by_kind(live, "ConfigMap")[0]["data"]["discover_hosts.sh"]


def test_empty_ssh_auth_mount_path_is_the_default_as_upstream():
    def ssh_mounts(spec_value):
        kids = render(job(sshAuthMountPath=spec_value), observed(), Config())
        pods = [o["spec"] for o in kids if o["kind"] == "Pod"]
        pods += [o["spec"]["template"]["spec"] for o in kids if o["kind"] == "Job"]
        return {m["mountPath"] for p in pods for c in p["containers"] for m in c.get("volumeMounts", [])}

    assert "/root/.ssh" in ssh_mounts("")
    assert ssh_mounts("") == ssh_mounts("/root/.ssh")
