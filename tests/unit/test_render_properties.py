"""Hypothesis properties of render() and status() on valid MPIJobs and random observed states."""

import copy
import json
import os
import re

from hypothesis import HealthCheck, given, settings

from render import Observed, ValidationError, parse_mpijob, render, status
from tests import strategies as s

# RENDER_EXAMPLES raises the example count for a deeper local run; the default keeps the suite fast.
EXAMPLES = int(os.environ.get("RENDER_EXAMPLES", "60"))
FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@FAST
@given(s.scenarios())
def test_render_and_status_are_total_and_deterministic(scenario):
    job, observed, config = scenario
    frozen = json.dumps(job, sort_keys=True)
    first = render(job, observed, config)
    again = render(copy.deepcopy(job), observed, config)
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert status(job, observed, config) == status(copy.deepcopy(job), observed, config)
    assert json.dumps(job, sort_keys=True) == frozen, "render must not mutate its input"
    json.dumps(first)  # wire form: only JSON types


@FAST
@given(s.scenarios())
def test_status_is_a_fixed_point(scenario):
    """Writing the computed status and computing again changes nothing: a converged job sees no writes."""
    job, observed, config = scenario
    new = status(job, observed, config)
    job2 = {**job, "status": new}
    assert status(job2, observed, config) == new
    # render gives the same children whether or not the controller wrote the status first
    assert render(job2, observed, config) == render(job, observed, config)


@FAST
@given(s.scenarios())
def test_every_child_is_owned_and_validly_named(scenario):
    job, observed, config = scenario
    children = render(job, observed, config)
    meta = job["metadata"]
    if job["spec"].get("runPolicy", {}).get("managedBy") == "kueue.x-k8s.io/multikueue":
        assert children == []
        return
    names_seen = set()
    for child in children:
        m = child["metadata"]
        key = (child["apiVersion"], child["kind"], m["name"])
        assert key not in names_seen
        names_seen.add(key)
        assert m["namespace"] == meta["namespace"]
        refs = [r for r in m["ownerReferences"] if r.get("controller")]
        assert refs == [
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        name = m["name"]
        if child["kind"] == "Service":
            assert DNS1035_LABEL.match(name) and len(name) <= 63
        elif child["kind"] in ("Pod", "Job"):
            # Pod names are hostnames; Job names go into a label value.
            assert DNS1123_LABEL.match(name) and len(name) <= 63
        else:
            assert DNS1123_SUBDOMAIN.match(name) and len(name) <= 253
        labels = dict(m.get("labels") or {})
        if child["kind"] == "Job":
            labels.update(child["spec"]["template"]["metadata"]["labels"])
        for value in labels.values():
            assert LABEL_VALUE.match(value) and len(value) <= 63
        pod_spec = (
            child["spec"]
            if child["kind"] == "Pod"
            else (child.get("spec") or {}).get("template", {}).get("spec")
        )
        if pod_spec is not None:
            assert DNS1123_LABEL.match(pod_spec["hostname"]) and len(pod_spec["hostname"]) <= 63
            volume_names = [v["name"] for v in pod_spec["volumes"]]
            assert len(volume_names) == len(set(volume_names))
            mounts = [v["mountPath"] for v in pod_spec["containers"][0]["volumeMounts"]]
            assert len(mounts) == len(set(mounts))


@FAST
@given(s.scenarios())
def test_hostfile_lists_exactly_the_expected_hosts(scenario):
    job, observed, config = scenario
    children = render(job, observed, config)
    cms = [c for c in children if c["kind"] == "ConfigMap"]
    if not cms:
        return
    parsed = parse_mpijob(job)
    name, ns = parsed.name, parsed.namespace
    hosts = [f"{name}-launcher"] if parsed.run_launcher_as_worker else []
    hosts += [f"{name}-worker-{i}" for i in range(parsed.worker_replicas)]
    suffix = f".{name}.{ns}.svc" + (f".{config.cluster_domain}" if config.cluster_domain else "")
    slots = parsed.spec.slots_per_worker
    # the launcher's own line is its bare hostname; workers are FQDNs
    fqdns = [h if h.endswith("-launcher") else h + suffix for h in hosts]
    if parsed.spec.mpi_implementation == "OpenMPI":
        expected = [f"{h} slots={slots}" for h in fqdns]
    else:
        expected = [f"{h}:{slots}" for h in fqdns]
    assert cms[0]["data"]["hostfile"].splitlines() == expected
    script = cms[0]["data"]["discover_hosts.sh"].splitlines()
    assert script[0] == "#!/bin/sh"
    listed = [line.removeprefix("echo ").removesuffix(suffix) for line in script[1:]]
    indexes = [int(h.rsplit("-", 1)[1]) for h in listed if "-worker-" in h]
    assert indexes == sorted(indexes)
    assert set(listed) <= set(hosts)


@FAST
@given(s.scenarios())
def test_lifecycle_rules(scenario):
    """Suspended: no workers; finished: no new workers and no PodGroup; the launcher Job is never dropped."""
    job, observed, config = scenario
    if job["spec"].get("runPolicy", {}).get("managedBy") == "kueue.x-k8s.io/multikueue":
        return
    children = render(job, observed, config)
    conds = {c["type"]: c["status"] for c in status(job, observed, config).get("conditions", [])}
    kinds = [c["kind"] for c in children]
    finished = conds.get("Succeeded") == "True" or conds.get("Failed") == "True"
    live_names = {(o["kind"], o["metadata"]["name"]) for o in observed.objects}
    workers = [c for c in children if c["kind"] == "Pod"]
    if job["spec"].get("runPolicy", {}).get("suspend") and not finished:
        assert workers == []
        assert "PodGroup" not in kinds and "Workload" not in kinds
        assert [c["spec"]["suspend"] for c in children if c["kind"] == "Job"] == [True]
    if finished:
        assert "PodGroup" not in kinds and "Workload" not in kinds
        assert all(("Pod", w["metadata"]["name"]) in live_names for w in workers)
    launcher = f"{job['metadata']['name']}-launcher"
    live_launcher = any(o["kind"] == "Job" and o["metadata"]["name"] == launcher for o in observed.objects)
    if live_launcher:
        assert "Job" in kinds, "an existing launcher Job must always be rendered (or it would be deleted)"


@FAST
@given(s.scenarios())
def test_only_workers_join_a_kubernetes_gang(scenario):
    """With the Workload API every worker carries the served version's reference, the launcher never."""
    job, observed, config = scenario
    children = render(job, observed, config)
    refs = {"workloadRef", "schedulingGroup"}
    for launcher in (c for c in children if c["kind"] == "Job"):
        assert not refs & set(launcher["spec"]["template"]["spec"])
    workers = [c for c in children if c["kind"] == "Pod"]
    gang = config.gang_scheduling == "kubernetes" and config.workload_api != ""
    field = "workloadRef" if config.workload_api.endswith("v1alpha1") else "schedulingGroup"
    for w in workers:
        assert set(w["spec"]) & refs == ({field} if gang else set()), (config, w["spec"].keys() & refs)


@settings(max_examples=200, deadline=None)
@given(s.mpijobs(), s.MUTATIONS, s.JUNK, s.configs)
def test_mutated_jobs_raise_only_validation_error(job, path, junk, config):
    target = job
    for key in path[:-1]:
        if isinstance(target, dict):
            target = target.setdefault(key, {})
        elif isinstance(target, list) and isinstance(key, int) and key < len(target):
            target = target[key]
        else:
            return
    if isinstance(target, dict) or (
        isinstance(target, list) and isinstance(path[-1], int) and path[-1] < len(target)
    ):
        target[path[-1]] = junk
    observed = Observed.from_objects([], now=s.NOW, fresh_ssh_key=s.TEST_KEY)
    try:
        render(job, observed, config)
    except ValidationError as exc:
        assert exc.errors, "a ValidationError lists at least one error"
        assert all(e.path and e.message for e in exc.errors)
    # status never raises on a dict: an invalid spec becomes Failed/ValidationError
    st_ = status(job, observed, config)
    if not isinstance(st_, dict):
        raise AssertionError("status must return a dict")
