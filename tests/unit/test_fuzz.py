"""Fuzz: generated MPIJobs, valid and broken at every level, through parse, validation,
render, status, lifecycle, events and the CLI. Only ValidationError may come out of the library, the CLI
exits 0 or 2 (never 3, its internal error), and every error is one line with a field path.

The default run generates MPIJOB_FUZZ_EXAMPLES (1,000) cases; benchmarks/fuzz_bench.py runs 10,000.
"""

from __future__ import annotations

import io
import json
import os
import sys
from datetime import datetime
from typing import Any

from hypothesis import HealthCheck, given, settings

import render
from reconcile.mpijob.render_command import main
from render import Observed, ValidationError
from render.admission import admit
from render.observed import check_objects
from render.parse import too_deep
from tests import strategies as s

EXAMPLES = int(os.environ.get("MPIJOB_FUZZ_EXAMPLES", "1000"))
COUNT_FILE = os.environ.get("MPIJOB_FUZZ_COUNT_FILE", "")
_seen: dict[str, int] = {"cases": 0, "invalid": 0, "cli_2": 0}


def _check_lines(exc: ValidationError) -> None:
    assert exc.errors
    for line in exc.lines():
        assert line and "\n" not in line and "\r" not in line and "\u2028" not in line, line
    for e in exc.errors:
        assert e.path and e.message


def _cli(
    job: Any, observed: list[Any], key_file: str, obs_file: str, extra: list[str]
) -> tuple[int, str, str]:
    with open(obs_file, "w", encoding="utf-8") as f:
        f.write(json.dumps(observed, default=str))
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr, sys.stdin = out, err, io.StringIO(json.dumps(job, default=str))
    try:
        code = main(
            ["-", "--now", "2025-06-01T12:00:00Z", "--ssh-key", key_file, "--observed", obs_file, *extra]
        )
    finally:
        sys.stdout, sys.stderr, sys.stdin = old
    return code, out.getvalue(), err.getvalue()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(case=s.fuzz_cases(), config=s.configs)
def test_every_generated_mpijob_ends_in_a_result_or_a_validation_error(case, config, tmp_path_factory):
    job, observed_objects = case
    _seen["cases"] += 1
    # the library takes live objects as the API server shapes them; the CLI checks untrusted ones first
    objects = [o for o in observed_objects if isinstance(o, dict)]
    if too_deep(objects) is not None or check_objects(objects):
        objects = []
    observed = Observed.from_objects(objects, now=s.NOW, fresh_ssh_key=s.TEST_KEY)
    try:
        parsed = render.parse_mpijob(job)
        assert isinstance(parsed, render.MPIJob)
    except ValidationError as exc:
        _check_lines(exc)
        _seen["invalid"] += 1
    rendered = False
    try:
        children = render.render(job, observed, config)
        assert all(isinstance(c, dict) and c.get("kind") for c in children)
        json.dumps(children)  # what the executor sends
        rendered = True
    except ValidationError as exc:
        _check_lines(exc)
    st = render.status(job, observed, config)
    assert isinstance(st, dict)
    json.dumps(st, default=str)
    expired = render.ttl_expired(job, st, s.NOW)
    assert isinstance(expired, bool)
    wake = render.next_wakeup(job, st, s.NOW)
    assert wake is None or isinstance(wake, datetime)
    old = job.get("status") if isinstance(job, dict) else None
    for e in render.events(job, old if isinstance(old, dict) else {}, st):
        assert "\n" not in e.reason

    tmp = tmp_path_factory.getbasetemp()
    key_file = tmp / "fuzz-key.pem"
    if not key_file.exists():
        key_file.write_text(render.generate_ssh_key().private_pem)
    cli_args = [
        "--cluster-domain",
        config.cluster_domain,
        "--gang-scheduling",
        config.gang_scheduling,
    ]
    code, _out, err = _cli(job, observed_objects, str(key_file), str(tmp / "fuzz-observed.json"), cli_args)
    assert code in (0, 2), err
    if rendered and objects == [o for o in observed_objects if isinstance(o, dict)]:
        # the CLI judges a job as the library does, after what the API server would refuse first; live
        # objects that are no named objects and JSON of lone surrogates (no YAML) have their own verdicts
        verdict = admit(job) if isinstance(job, dict) else None
        refused = verdict is not None and bool(verdict.errors or verdict.unknown)
        assert code == 0 or refused or err.startswith(("STDIN: ", "--observed")) or ": line " in err, err
    assert "Traceback" not in err and "error: internal" not in err, err
    if code == 2:
        _seen["cli_2"] += 1
        assert err.strip()
        first = err.split(":", 1)[0].split("[", 1)[0].split(".", 1)[0]
        _seen[f"cli_2:{first}"] = _seen.get(f"cli_2:{first}", 0) + 1


def teardown_module() -> None:
    if COUNT_FILE:
        with open(COUNT_FILE, "w", encoding="utf-8") as f:
            json.dump(_seen, f)
