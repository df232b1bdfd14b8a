"""Hostile and broken input: only ValidationError from the library, the CLI exits 0 or 2 with one
line per error, every number bounded, every computed time representable."""

from __future__ import annotations

import contextlib
import copy
import json
from datetime import UTC, datetime

import pytest

from render import Config, Observed, ValidationError, bounds, next_wakeup, render, status, ttl_expired
from render.parse import MAX_DEPTH, load_yaml, parse_mpijob
from render.timeutil import END_OF_TIME, format_time, parse_time
from tests.unit.render_helpers import KEY, NOW, job, run_cli

OBSERVED = Observed.from_objects([], now=NOW, fresh_ssh_key=KEY)


def _errors(obj: object) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_mpijob(obj)
    return info.value.lines()


def _everything(obj: object) -> None:
    """render, status and lifecycle on `obj`: each may say ValidationError, nothing else."""
    with contextlib.suppress(ValidationError):
        render(obj, OBSERVED, Config())  # type: ignore[arg-type]
    st = status(obj, OBSERVED, Config())  # type: ignore[arg-type]
    ttl_expired(obj, st, NOW)  # type: ignore[arg-type]
    next_wakeup(obj, st, NOW)  # type: ignore[arg-type]


def _worker_container(j: dict) -> dict:
    return j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_quantities_are_validation_errors(value):
    j = job()
    _worker_container(j)["resources"] = {"limits": {"cpu": value}}
    (line,) = _errors(j)
    assert line.startswith("spec.mpiReplicaSpecs[Worker].template.spec.containers[0].resources.limits[cpu]: ")
    _everything(j)
    j = job(runPolicy={"schedulingPolicy": {"minResources": {"cpu": value}}})
    assert _errors(j)[0].startswith("spec.runPolicy.schedulingPolicy.minResources[cpu]: ")


def _nested(depth: int) -> dict:
    out: dict = {}
    cur = out
    for _ in range(depth):
        cur["a"] = {}
        cur = cur["a"]
    return out


@pytest.mark.parametrize("depth", [500, 5000])
def test_deep_nesting_anywhere_is_a_validation_error(depth):
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = _nested(depth)
    (line,) = _errors(j)
    assert line.startswith("spec.mpiReplicaSpecs.Worker.template.spec.affinity.a.a") and "deeper than" in line
    _everything(j)
    j = job()
    j["status"] = _nested(depth)
    assert "deeper than" in _errors(j)[0]
    _everything(j)


def test_nesting_within_the_limit_is_fine():
    j = job()
    _worker_container(j)["env"] = [{"name": "X", "valueFrom": _nested(MAX_DEPTH - 12)}]
    parse_mpijob(j)


def test_deep_yaml_is_a_validation_error():
    with pytest.raises(ValidationError):
        load_yaml("[" * 3000 + "]" * 3000)
    code, out, err = run_cli(["-"], stdin="a: " + "[" * 3000 + "]" * 3000)
    assert code == 2 and out == "" and err.count("\n") == 1


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        ("activeDeadlineSeconds", 300000000000, bounds.MAX_DURATION_SECONDS),
        ("ttlSecondsAfterFinished", 2**31, bounds.INT32_MAX),
        ("backoffLimit", 2**40, bounds.INT32_MAX),
    ],
)
def test_durations_and_counts_are_bounded(field, value, limit):
    j = job(runPolicy={field: value})
    assert _errors(j) == [
        f"spec.runPolicy.{field}: Invalid value: {value}: must be less than or equal to {limit}"
    ]
    _everything(j)
    parse_mpijob(job(runPolicy={field: limit}))


def test_the_largest_deadline_from_now_is_representable():
    j = job(runPolicy={"activeDeadlineSeconds": bounds.MAX_DURATION_SECONDS})
    j["status"] = {"startTime": format_time(NOW), "conditions": [{"type": "Created", "status": "True"}]}
    wake = next_wakeup(j, status(j, OBSERVED, Config()), NOW)
    assert wake is not None and wake.year > 2300


def test_times_in_year_9999_saturate_instead_of_overflowing():
    j = job(runPolicy={"activeDeadlineSeconds": 10, "ttlSecondsAfterFinished": 100})
    far = "9999-12-31T23:59:59Z"
    j["status"] = {"startTime": far, "conditions": [{"type": "Created", "status": "True"}]}
    st = status(j, OBSERVED, Config())
    assert next_wakeup(j, st, NOW) == END_OF_TIME
    render(j, OBSERVED, Config())
    j["status"] = {
        "startTime": far,
        "completionTime": far,
        "conditions": [{"type": "Created", "status": "True"}, {"type": "Failed", "status": "True"}],
    }
    assert not ttl_expired(j, j["status"], NOW)
    assert next_wakeup(j, j["status"], NOW) == END_OF_TIME
    _everything(j)


def test_offsets_that_leave_the_calendar_are_unreadable_times():
    assert parse_time("9999-12-31T23:59:59-05:00") is None
    assert parse_time("0001-01-01T00:00:00+05:00") is None
    assert parse_time("2025-06-01T12:00:00+02:00") == datetime(2025, 6, 1, 10, 0, tzinfo=UTC)


def test_worker_count_is_bounded_by_the_hostfile_configmap():
    name = "abcdefghij"  # 10 characters
    limit = bounds.max_workers(len(name))
    assert limit == 2964
    assert bounds.configmap_bytes(len(name), limit) <= bounds.CONFIGMAP_MAX_BYTES
    j = job()
    j["metadata"]["name"] = name
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = limit
    parse_mpijob(j)
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = limit + 1
    (line,) = _errors(j)
    assert line.startswith(
        f"spec.mpiReplicaSpecs[Worker].replicas: Invalid value: {limit + 1}: must be less than or equal to "
        f"{limit} for a job whose name has 10 characters"
    )
    for replicas in (30000, bounds.INT32_MAX):
        j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
        assert _errors(j)[0].startswith("spec.mpiReplicaSpecs[Worker].replicas: ")


def test_the_bound_is_a_real_upper_bound_of_the_rendered_configmap():
    # the worst case the bound assumes: long namespace, long cluster domain, 10-digit slots, launcher too
    name = "abcdefghij"
    j = job(slotsPerWorker=bounds.INT32_MAX, runLauncherAsWorker=True)
    j["metadata"].update(name=name, namespace="n" * 63)
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = bounds.max_workers(len(name))
    objects = Observed.from_objects([], now=NOW, fresh_ssh_key=KEY)
    children = render(j, objects, Config(cluster_domain="d" * bounds.CLUSTER_DOMAIN_MAX))
    (cm,) = [c for c in children if c["kind"] == "ConfigMap"]
    hostfile = cm["data"]["hostfile"]
    every_host = hostfile.replace(" slots=2147483647", "").splitlines()
    script = "#!/bin/sh\n" + "".join(f"echo {h}\n" for h in every_host)  # all workers running
    size = sum(len(k) + len(v) for k, v in {"hostfile": hostfile, "discover_hosts.sh": script}.items())
    assert size <= bounds.configmap_bytes(len(name), bounds.max_workers(len(name)))
    assert size > 0.95 * bounds.CONFIGMAP_MAX_BYTES  # and not a loose one


def test_error_lines_cannot_forge_other_lines():
    j = job()
    j["metadata"]["name"] = "pi\nspec.fake: Invalid value"
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {"k\nx: y": "v"}}
    _worker_container(j)["name"] = "c\u2028d"
    lines = _errors(j)
    assert len(lines) == 3
    for line in lines:
        assert "\n" not in line and "\u2028" not in line
    assert lines[0].startswith('metadata.name: Invalid value: "pi\\nspec.fake: Invalid value": ')
    assert any(
        line.startswith('spec.mpiReplicaSpecs[Worker].template.metadata.labels["k\\nx: y"]: ')
        for line in lines
    )


def test_cli_exits_2_with_one_line_per_error(tmp_path):
    bad = copy.deepcopy(job())
    bad["metadata"]["name"] = "x\ny"
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(bad))
    code, out, err = run_cli([str(path)])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith('metadata.name: Invalid value: "x\\ny"')
    code, _, err = run_cli([str(tmp_path / "missing.yaml")])
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    (tmp_path / "key").write_text("not a key")
    code, _, err = run_cli([str(path), "--ssh-key", str(tmp_path / "key")])
    assert code == 2 and err.count("\n") >= 1
    code, _, err = run_cli([str(path), "--cluster-domain", "d" * 64])
    assert code == 2
    code, _, err = run_cli(["-"], stdin="[1, 2]")  # a YAML list is a stream of two MPIJobs
    assert code == 2 and err.splitlines() == [
        "item 0: <root>: Invalid value: number: must be an object",
        "item 1: <root>: Invalid value: number: must be an object",
    ]


def test_cli_never_tracebacks(tmp_path):
    for text in ("{", "\x00", "a: !!python/object:os.system x", "- [" * 600, "metadata: [1]\nspec: 3"):
        code, _, err = run_cli(["-"], stdin=text)
        assert code == 2, text
        assert "Traceback" not in err
    code, _out, err = main_with_observed(tmp_path, "- " + "[" * 2000 + "]" * 2000)
    assert code == 2 and "Traceback" not in err


def main_with_observed(tmp_path, observed_text):
    (tmp_path / "obs.yaml").write_text(observed_text)
    j = job()
    (tmp_path / "job.yaml").write_text(json.dumps(j))
    return run_cli([str(tmp_path / "job.yaml"), "--observed", str(tmp_path / "obs.yaml")])


def test_malformed_observed_objects_are_validation_errors_in_the_cli(tmp_path):
    # found by the fuzz test: the CLI took `metadata: true` in --observed to an AttributeError
    code, _, err = main_with_observed(
        tmp_path, '[{"kind": "ConfigMap", "metadata": true}, {"kind": "Pod", "status": {"conditions": [1]}}]'
    )
    assert code == 2
    assert err.splitlines() == [
        "--observed[0].metadata: Invalid value: must be an object",
        "--observed[1].status.conditions[0]: Invalid value: must be an object",
        "--observed[1].metadata.name: Required value",
    ]
    code, _, err = main_with_observed(tmp_path, "a: [")
    assert code == 2 and err.startswith(f"{tmp_path / 'obs.yaml'}: line ")
