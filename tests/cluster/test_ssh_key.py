"""L1: each MPIJob's SSH private key is in its own Secret, mounted only by that job's pods, and nowhere a
person reads: the operator's debug log, Events, the MPIJob object, `mpijob plan` in each format,
`mpijob render` without --show-secrets, and /metrics."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.e2e import condition_is
from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.engine.redact import HIDDEN
from reconcile.mpijob import plan_command, render_command
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, EVENT, JOB, JSON_PATCH, POD, SECRET, SERVICE, ApiError, Kube
from render import names
from tests.cluster.support import create_launcher_pod, create_mpijob, workers
from tests.utils import key_forms, leaked, secret_refs

pytestmark = pytest.mark.l1


def private_key(kube: Kube, namespace: str, job: str) -> str:
    secret = kube.get(SECRET, namespace, names.ssh_secret_name(job))
    return base64.b64decode(secret["data"][names.SSH_PRIVATE_KEY]).decode()


def both_keys(kube: Kube, namespace: str, job: str) -> bool:
    data = kube.get(SECRET, namespace, names.ssh_secret_name(job)).get("data") or {}
    return names.SSH_PRIVATE_KEY in data and names.SSH_PUBLIC_KEY in data


def test_each_jobs_pods_mount_only_its_own_secret(kube, namespace, start_operator):
    start_operator()
    jobs = ("alpha", "beta")
    for job in jobs:
        create_mpijob(kube, namespace, pi_job(job))
    for job in jobs:
        wait_for(lambda job=job: len(workers(kube, namespace, job)) == 2, f"{job}: 2 workers")
        wait_for(lambda job=job: kube.get(JOB, namespace, names.launcher_name(job)), f"{job}: launcher Job")
        # what the Job controller (not running in L1) would create from the launcher Job's template
        create_launcher_pod(kube, namespace, names.launcher_name(job))
    pods: dict[str, list[dict[str, Any]]] = {}
    for pod in kube.list(POD, namespace)["items"]:
        pods.setdefault(pod["metadata"]["labels"].get(names.LABEL_JOB_NAME, ""), []).append(pod)
    assert {job: len(pods.get(job, [])) for job in jobs} == {"alpha": 3, "beta": 3}, pods.keys()
    assert set(pods) == set(jobs), "pods of no job in the namespace"
    for job in jobs:
        for pod in pods[job]:
            assert secret_refs(pod["spec"]) == {f"{job}-ssh"}, pod["metadata"]["name"]
        template = kube.get(JOB, namespace, names.launcher_name(job))["spec"]["template"]["spec"]
        assert secret_refs(template) == {f"{job}-ssh"}
    assert private_key(kube, namespace, "alpha") != private_key(kube, namespace, "beta")


def _children_file(kube: Kube, namespace: str, job: str, path: Path) -> Path:
    """The job's live children, as `kubectl get pods,jobs,services,configmaps,secrets -l ...` lists them."""
    selector = f"{names.LABEL_JOB_NAME}={job}"
    items = [
        obj
        for res in (POD, JOB, SERVICE, CONFIGMAP, SECRET)
        for obj in kube.list(res, namespace, labelSelector=selector)["items"]
    ]
    assert any(o["kind"] == "Secret" for o in items)
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_the_private_key_shows_on_no_surface(l1_cluster, kube, namespace, start_operator, tmp_path, capsys):
    op = start_operator("--log-level=debug")
    create_mpijob(kube, namespace, pi_job("pi"))
    secret = names.ssh_secret_name("pi")
    wait_for(lambda: both_keys(kube, namespace, "pi"), "the SSH Secret")
    wait_for(lambda: condition_is(kube.get(MPIJOB, namespace, "pi"), "Created"), "Created")
    keys = [private_key(kube, namespace, "pi")]

    # A drift the differ compares (a label it sets): logged at debug with the Secret's diff, then undone.
    remove_label = [{"op": "remove", "path": "/metadata/labels/app"}]
    kube.patch(SECRET, namespace, secret, remove_label, content_type=JSON_PATCH)
    wait_for(lambda: "app" in kube.get(SECRET, namespace, secret)["metadata"]["labels"], "the label back")
    drift_line = f"drift in Secret {namespace}/{secret}"
    wait_for(lambda: drift_line in op.log_path.read_text(), "the differ's debug line")
    # Key material taken away: the operator replaces the Secret (a new key pair); both keys are searched.
    remove_public = [{"op": "remove", "path": f"/data/{names.SSH_PUBLIC_KEY}"}]
    kube.patch(SECRET, namespace, secret, remove_public, content_type=JSON_PATCH)
    wait_for(lambda: both_keys(kube, namespace, "pi"), "both keys back")
    keys.append(private_key(kube, namespace, "pi"))

    code, metrics = op.http("/metrics")
    assert code == 200
    op.stop()  # its log is complete from here on
    surfaces = {"operator log": op.log_path.read_text(), "/metrics": metrics}
    for event in kube.list(EVENT, namespace)["items"]:
        surfaces[f"event {event['reason']} {event['metadata']['name']}"] = json.dumps(event)
    mpijob = kube.get(MPIJOB, namespace, "pi")
    surfaces["the MPIJob object"] = json.dumps(mpijob)

    # The label drift again, so the plan holds an entry for the Secret.
    kube.patch(SECRET, namespace, secret, remove_label, content_type=JSON_PATCH)
    for fmt in ("yaml", "json", "text"):
        args = ["pi", "-n", namespace, "--kubeconfig", str(l1_cluster.kubeconfig), "-o", fmt]
        assert plan_command.main(args) == 1
        surfaces[f"mpijob plan -o {fmt}"] = capsys.readouterr().out
    assert f"Secret {namespace}/{secret}" in surfaces["mpijob plan -o text"]

    job_file = tmp_path / "mpijob.yaml"
    job_file.write_text(yaml.safe_dump(mpijob))
    observed = _children_file(kube, namespace, "pi", tmp_path / "observed.yaml")
    render_args = [str(job_file), "--observed", str(observed)]
    assert render_command.main(render_args) == 0
    rendered = capsys.readouterr().out
    surfaces["mpijob render"] = rendered
    assert HIDDEN in rendered

    forms = {f"key {i} {name}": form for i, key in enumerate(keys) for name, form in key_forms(key).items()}
    for surface, text in surfaces.items():
        assert leaked(text, forms) == [], f"{surface}: the private key leaks ({leaked(text, forms)})"

    # The search finds the key where it is: render prints it when asked.
    assert render_command.main([*render_args, "--show-secrets"]) == 0
    assert f"key {len(keys) - 1} base64" in leaked(capsys.readouterr().out, forms)

    # A masked render applied by mistake is refused, not stored as a key.
    (masked,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Secret"]
    masked["metadata"] = {"name": "applied-by-mistake"}
    with pytest.raises(ApiError) as refused:
        kube.create(SECRET, namespace, masked)
    assert refused.value.status in (400, 422), refused.value
