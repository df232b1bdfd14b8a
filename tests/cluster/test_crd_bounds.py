"""L1: the API server's admission and render's validation agree on every bound.

Each case goes to the real kube-apiserver as a server-side dry run and through render.parse_mpijob; both
must accept it or both reject it, and a rejection names the field and, for the worker count, the limit.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes import client

from localcluster.jobs import minimal_job
from render import ValidationError, bounds, parse_mpijob
from tests.cluster.support import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.l1


def _admitted(api: client.CustomObjectsApi, ns: str, obj: dict[str, Any]) -> tuple[bool, str]:
    try:
        api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj, dry_run="All")
    except client.ApiException as exc:
        assert exc.status == 422, exc.body
        return False, json.loads(exc.body)["message"]
    return True, ""


def _render_accepts(obj: dict[str, Any], ns: str) -> bool:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(namespace=ns, uid="u")
    try:
        parse_mpijob(obj)
    except ValidationError:
        return False
    return True


def _with(path: tuple[str, ...], value: Any, name: str = "pi") -> dict[str, Any]:
    job = minimal_job(name)
    target = job
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return job


RUN_POLICY = ("spec", "runPolicy")
SCHED = (*RUN_POLICY, "schedulingPolicy")
INT_FIELDS = [
    (("spec", "slotsPerWorker"), bounds.INT32_MAX),
    ((*RUN_POLICY, "backoffLimit"), bounds.INT32_MAX),
    ((*RUN_POLICY, "ttlSecondsAfterFinished"), bounds.INT32_MAX),
    ((*RUN_POLICY, "activeDeadlineSeconds"), bounds.MAX_DURATION_SECONDS),
    ((*SCHED, "minAvailable"), bounds.INT32_MAX),
    ((*SCHED, "scheduleTimeoutSeconds"), bounds.INT32_MAX),
]


@pytest.mark.parametrize(("path", "maximum"), INT_FIELDS, ids=[p[-1] for p, _ in INT_FIELDS])
def test_integer_bounds_agree(mpijobs, namespace, path, maximum):
    for value in (0, maximum, maximum + 1, -1, 300000000000):
        job = _with(path, value)
        admitted, message = _admitted(mpijobs, namespace, job)
        assert admitted == _render_accepts(job, namespace), (path, value, message)
        if not admitted:
            assert path[-1] in message


@pytest.mark.parametrize("length", [1, 10, 30, 45, 51, 52, 53, 54])
def test_worker_bound_agrees_for_name_lengths(mpijobs, namespace, length):
    name = "a" * length
    limit = bounds.max_workers(length)
    for workers in (limit, limit + 1):
        job = minimal_job(name, workers=workers)
        admitted, message = _admitted(mpijobs, namespace, job)
        assert admitted == _render_accepts(job, namespace), (length, workers, message)
        assert admitted == (workers == limit), (length, workers, message)
        if not admitted and length + len("-worker-") + len(str(workers - 1)) <= 63:
            assert f"must be less than or equal to {limit} for a job whose name has {length}" in message
            assert "spec.mpiReplicaSpecs[Worker].replicas: Invalid value" in message


def test_the_issues_bombs_are_rejected_at_admission(mpijobs, namespace):
    for workers in (30000, bounds.INT32_MAX):
        admitted, message = _admitted(mpijobs, namespace, minimal_job("bomb", workers=workers))
        assert not admitted and "less than or equal to" in message
    job = _with((*RUN_POLICY, "activeDeadlineSeconds"), 300000000000)
    admitted, message = _admitted(mpijobs, namespace, job)
    assert not admitted and "activeDeadlineSeconds" in message
