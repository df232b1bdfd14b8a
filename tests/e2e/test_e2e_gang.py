"""Gang scheduling end to end (upstream's e2e scenarios 12 and 13): the operator restarted with
`--gang-scheduling`, the PodGroup CRDs installed (tests/crds), a PodGroup per job.

No real Volcano or scheduler-plugins runs here. Until a test starts a second kube-scheduler serving the
gang scheduler's name, nothing binds the job's pods, which is what a gang scheduler does while the
PodGroup's minResources cannot be met; once minResources is lifted the stand-in binds them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster.e2e import E2E, KNOB, condition_is, phase
from localcluster.jobs import pi_job
from reconcile.mpijob.kinds import SCHED_PLUGINS_PODGROUP, VOLCANO_PODGROUP
from tests.e2e.support import extra_scheduler

pytestmark = pytest.mark.l2

HUGE = {"cpu": "100000", "memory": "100000Gi"}

CASES = {
    "scheduler-plugins": (
        "scheduler-plugins-scheduler",
        SCHED_PLUGINS_PODGROUP,
        "scheduler-plugins-scheduler",
    ),
    "volcano": ("volcano", VOLCANO_PODGROUP, "volcano"),
}


def pod_in_group(pod: dict, flag: str, job: str) -> bool:
    meta = pod["metadata"]
    if flag == "volcano":
        return (meta.get("annotations") or {}).get("scheduling.k8s.io/group-name") == job
    return (meta.get("labels") or {}).get("scheduling.x-k8s.io/pod-group") == job


def gang_job(resources: bool) -> dict:
    job = pi_job(
        root=True,
        resources=False,
        launcher_annotations={f"{KNOB}delay": "3s"},
        run_policy={"schedulingPolicy": {"minResources": dict(HUGE)}},
    )
    if resources:  # as upstream's pi example: limits only, which the computed minResources falls back to
        for spec in job["spec"]["mpiReplicaSpecs"].values():
            spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    return job


def run_gang_job(e2e: E2E, case: str, tmp_path: Path, resources: bool, computed: dict | None) -> None:
    flag, pg_res, scheduler_name = CASES[case]
    with e2e.operator.with_flags(f"--gang-scheduling={flag}"):
        e2e.submit(gang_job(resources))
        e2e.wait_condition("pi", "Created")
        pg = e2e.wait_for(lambda: e2e.find("pi", pg_res), f"{pg_res.kind} pi", job="pi")
        assert pg["spec"]["minMember"] == 3  # 2 workers + the launcher
        assert pg["spec"]["minResources"] == HUGE
        e2e.wait_for(lambda: len(e2e.workers("pi")) == 2, "2 worker pods", job="pi")
        e2e.wait_for(lambda: len(e2e.launcher_pods("pi")) == 1, "launcher pod", job="pi")
        for pod in e2e.pods("pi"):
            assert pod["spec"]["schedulerName"] == scheduler_name, pod["metadata"]["name"]
            assert pod_in_group(pod, flag, "pi"), pod["metadata"]
            assert phase(pod) == "Pending", e2e.describe("pi")
        assert not condition_is(e2e.get("pi"), "Running")

        # Lift minResources: the PodGroup follows the spec, the scheduler admits the gang.
        e2e.patch("pi", {"spec": {"runPolicy": {"schedulingPolicy": {"minResources": None}}}})
        e2e.wait_for(
            lambda: e2e.get("pi", pg_res)["spec"].get("minResources") == computed,
            f"PodGroup minResources recomputed as {computed}",
            job="pi",
        )
        with extra_scheduler(e2e.cluster, (scheduler_name,), tmp_path / "scheduler"):
            e2e.wait_condition("pi", "Running")
            job = e2e.wait_finished("pi")
            assert condition_is(job, "Succeeded"), e2e.describe("pi")
        # Cleanup after finish deletes the PodGroup with the workers.
        e2e.wait_for(lambda: e2e.find("pi", pg_res) is None, "PodGroup deleted after finish", job="pi")


@pytest.mark.parametrize("case", list(CASES))
def test_gang_scheduling(e2e: E2E, podgroup_crds: None, case: str, tmp_path: Path) -> None:
    # Launcher + 2 workers with 1 cpu / 1Gi each.
    run_gang_job(e2e, case, tmp_path, resources=True, computed={"cpu": "3", "memory": "3Gi"})


def test_lifting_min_resources_without_requests_clears_them(
    e2e: E2E, podgroup_crds: None, tmp_path: Path
) -> None:
    """Nothing to compute (no requests or limits): the user's old minResources must not stay behind,
    or the gang scheduler keeps waiting for 100000 CPUs."""
    run_gang_job(e2e, "scheduler-plugins", tmp_path, resources=False, computed=None)
