"""L2: a label the operator set on a child, changed by someone else, is put back with a patch; the rest of
the object is left as it is (no delete, no re-create)."""

from __future__ import annotations

import pytest

from localcluster.e2e import E2E, HOLD, JOB_NAME_LABEL
from localcluster.jobs import minimal_job
from reconcile.runtime.kube import CONFIGMAP, JSON_PATCH, SECRET, SERVICE, WORKLOAD_V1ALPHA1, Resource
from render import names

pytestmark = pytest.mark.l2

CHILDREN = [
    pytest.param(SERVICE, "", (), id="Service"),
    pytest.param(CONFIGMAP, names.CONFIG_SUFFIX, (), id="ConfigMap"),
    pytest.param(SECRET, names.SSH_SUFFIX, (), id="Secret"),
    # the local cluster's Kubernetes minor serves this version
    pytest.param(WORKLOAD_V1ALPHA1, "", ("--gang-scheduling=kubernetes",), id="Workload"),
]


@pytest.mark.parametrize(("res", "suffix", "flags"), CHILDREN)
def test_a_changed_label_of_a_child_is_patched_back(
    e2e: E2E, res: Resource, suffix: str, flags: tuple[str, ...]
) -> None:
    with e2e.operator.with_flags(*flags):
        job = minimal_job("drift", workers=1)
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] = {"annotations": HOLD}
        e2e.submit(job)
        name = f"drift{suffix}"
        child = e2e.wait_for(lambda: e2e.find(name, res), f"{res.kind} {name}")
        uid = child["metadata"]["uid"]
        e2e.patch(name, {"metadata": {"labels": {JOB_NAME_LABEL: "someone-else"}}}, res)

        def restored() -> dict | None:
            obj = e2e.find(name, res)
            return obj if obj and obj["metadata"]["labels"].get(JOB_NAME_LABEL) == "drift" else None

        back = e2e.wait_for(restored, f"{res.kind} {name}'s {JOB_NAME_LABEL} label put back")
        assert back["metadata"]["uid"] == uid, "patched in place, not re-created"


def test_an_ssh_secret_that_lost_its_key_is_replaced(e2e: E2E) -> None:
    job = minimal_job("keyless", workers=1)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] = {"annotations": HOLD}
    e2e.submit(job)
    name = names.ssh_secret_name("keyless")
    old = e2e.wait_for(lambda: e2e.find(name, SECRET), f"Secret {name}")
    remove = [{"op": "remove", "path": f"/data/{names.SSH_PUBLIC_KEY}"}]
    e2e.kube.patch(SECRET, e2e.ns, name, remove, content_type=JSON_PATCH)

    def replaced() -> dict | None:
        new = e2e.find(name, SECRET)
        keys = set((new or {}).get("data") or {})
        whole = {names.SSH_PRIVATE_KEY, names.SSH_PUBLIC_KEY} <= keys
        return new if new and new["metadata"]["uid"] != old["metadata"]["uid"] and whole else None

    new = e2e.wait_for(replaced, f"Secret {name} replaced with a whole key pair")
    assert new["data"][names.SSH_PRIVATE_KEY] != old["data"][names.SSH_PRIVATE_KEY], "a fresh key"
