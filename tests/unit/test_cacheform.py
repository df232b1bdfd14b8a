"""The informers' cache form (reconcile/mpijob/cacheform.py) changes no decision: render, status and
the differ give the same answers on cached objects as on the objects the server sent."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from reconcile.engine.differ import plan
from reconcile.engine.semantics import MISSING, get_path, set_path
from reconcile.mpijob.cacheform import cache_form, kept_spec_paths
from reconcile.mpijob.policy import POLICY
from render import Observed, failures, render, status
from render.keys import load_ssh_key
from render.parse import parse_mpijob
from render.phases import gate_wait, pod_running_start
from render.timeutil import parse_time
from tests.unit.golden_cases import KEY_FILE, cases, load_case

RECORDED = Path(__file__).resolve().parent / "recorded"
FILES = sorted(RECORDED.glob("*.json"))


def cached(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [cache_form(copy.deepcopy(o), o["apiVersion"], o["kind"]) for o in objs]


def test_create_only_kinds_keep_every_path_the_policy_may_change():
    for (group, kind), kp in POLICY.kinds.items():
        paths = kept_spec_paths(POLICY, group, kind)
        if kp.mode != "create-only" or paths is None:
            continue
        wanted = [*kp.mutable_paths]
        for rule in kp.conditional:
            wanted += [*rule.paths, *(p.path for p in rule.when)]
        for path in wanted:
            if path.startswith("spec."):
                assert path in paths, (kind, path)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_cached_objects_are_smaller(path: Path) -> None:
    rec = json.loads(path.read_text())
    for live in rec["live"]:
        if live["kind"] in ("Pod", "Job"):
            assert len(json.dumps(cached([live])[0])) < len(json.dumps(live)) / 2, live["metadata"]["name"]


def _perturbations(rec: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """(what, desired, live) variations that make the differ work: drift, removals, a suspended Job."""
    out = [("as recorded", rec["desired"], rec["live"])]
    desired = copy.deepcopy(rec["desired"])
    for obj in desired:
        labels = obj["metadata"]["labels"]
        del labels[sorted(labels)[-1]]
        obj["metadata"].setdefault("annotations", {})["new"] = "x"
    out.append(("labels dropped, annotation added", desired, rec["live"]))
    live = copy.deepcopy(rec["live"])
    for obj in live:
        obj["metadata"]["labels"]["foreign"] = "y"
        obj["metadata"]["labels"][sorted(obj["metadata"]["labels"])[0]] = "edited"
    out.append(("labels edited live", rec["desired"], live))
    desired, live = copy.deepcopy(rec["desired"]), copy.deepcopy(rec["live"])
    for want, have in zip(desired, live, strict=True):
        if want["kind"] == "Job":
            want["spec"]["suspend"] = have["spec"]["suspend"] = True
            have.get("status", {}).pop("startTime", None)
            set_path(want, "spec.template.spec.nodeSelector", {"pool": "b"})
            if get_path(have, "spec.template.spec.tolerations") is MISSING:
                set_path(have, "spec.template.spec.tolerations", [{"key": "k", "operator": "Exists"}])
    out.append(("suspended Job, scheduling changed", desired, live))
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_the_differ_plans_the_same_on_cached_objects(path: Path) -> None:
    rec = json.loads(path.read_text())
    for what, desired, live in _perturbations(rec):
        full = plan(desired, live, POLICY, rec["owner_uid"])
        slim = plan(desired, cached(live), POLICY, rec["owner_uid"])
        assert slim == full, what


@pytest.mark.parametrize("case", cases())
def test_render_and_status_are_the_same_on_cached_objects(case: str) -> None:
    mpijob, objects, config, now_text = load_case(case)
    now = parse_time(now_text)
    key = load_ssh_key(KEY_FILE.read_text())
    objects = [o for o in objects if isinstance(o, dict) and "apiVersion" in o and "kind" in o]
    full = Observed.from_objects(objects, now=now, fresh_ssh_key=key)
    slim = Observed.from_objects(cached(objects), now=now, fresh_ssh_key=key)
    assert status(mpijob, slim, config) == status(mpijob, full, config)
    try:
        parse_mpijob(mpijob)
    except Exception:
        return  # an invalid MPIJob renders nothing either way (status above covers it)
    assert render(mpijob, slim, config) == render(mpijob, full, config)


def test_cached_pods_keep_what_the_phase_metrics_read():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pi-launcher-x", "namespace": "ns"},
        "spec": {"containers": [{"name": "l", "image": "i"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-06-01T11:52:06Z"}],
            "initContainerStatuses": [
                {
                    "name": "wait-for-workers",
                    "image": "i",
                    "imageID": "sha256:x",
                    "ready": False,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "message": "2 host(s) reachable over SSH after 1.310s",
                            "startedAt": "2025-06-01T11:52:02Z",
                            "finishedAt": "2025-06-01T11:52:04Z",
                        }
                    },
                }
            ],
            "containerStatuses": [
                {
                    "name": "l",
                    "image": "i",
                    "imageID": "sha256:x",
                    "ready": True,
                    "started": True,
                    "state": {"running": {"startedAt": "2025-06-01T11:52:05Z"}},
                }
            ],
        },
    }
    kept = cached([pod])[0]
    assert pod_running_start(kept) == pod_running_start(pod) == parse_time("2025-06-01T11:52:05Z")
    assert gate_wait(kept) == gate_wait(pod) == 1.31
    assert "image" not in kept["status"]["containerStatuses"][0]


def test_an_evicted_pod_keeps_when_it_stopped_being_ready():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pi-worker-0", "namespace": "ns"},
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-06-01T11:50:00Z"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2025-06-01T11:52:06Z"},
            ],
        },
    }
    full = failures._failed_since(pod)
    assert full is not None
    assert failures._failed_since(cache_form(copy.deepcopy(pod), "v1", "Pod")) == full
    conds = cache_form(copy.deepcopy(pod), "v1", "Pod")["status"]["conditions"]
    assert conds[0] == {"type": "PodScheduled", "status": "True"}  # only Ready's time is read


def test_a_launcher_job_status_change_nobody_reads_leaves_the_cached_form_alone():
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi-launcher", "namespace": "ns"},
        "status": {"active": 1, "startTime": "2025-06-01T11:52:00Z", "ready": 0, "terminating": 0},
    }
    ready = copy.deepcopy(job)
    ready["status"].update(ready=1, uncountedTerminatedPods={})
    assert cache_form(copy.deepcopy(job), "batch/v1", "Job") == cache_form(ready, "batch/v1", "Job")
    done = copy.deepcopy(job)
    done["status"].update(active=0, succeeded=1, completionTime="2025-06-01T11:53:00Z")
    assert cache_form(copy.deepcopy(job), "batch/v1", "Job") != cache_form(done, "batch/v1", "Job")
