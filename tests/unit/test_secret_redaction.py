"""L0: the SSH private key lives in its job's one Secret, which only that job's pods mount, and stays out of
what people read: the differ's debug log, the executor's failures (log line, event), `mpijob plan`'s report
in every format, and `mpijob render`'s output unless --show-secrets asks for it.

Each surface is fed a real key and searched for it in every form (``tests.utils.key_forms``)."""

from __future__ import annotations

import base64
import binascii
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.engine import redact
from reconcile.engine.differ import plan
from reconcile.engine.executor import execute
from reconcile.engine.plan import Create, ObjectKey, Plan
from reconcile.engine.policy import Policy
from reconcile.engine.writer import WriteFailed
from reconcile.mpijob import plan_command
from reconcile.mpijob.memory import JobMemory
from render import Config, render
from render.keys import generate_ssh_key
from tests.unit.fakes import RecordingWriter
from tests.unit.golden_cases import GOLDEN
from tests.unit.render_helpers import UID, by_kind, job, observed, owner, run_cli
from tests.utils import key_forms, leaked, secret_refs

KEY = generate_ssh_key()
FORMS = key_forms(KEY.private_pem)
PRIVATE_B64 = base64.b64encode(KEY.private_pem.encode()).decode()
PUBLIC_B64 = base64.b64encode(KEY.public_openssh.encode()).decode()
OTHER_B64 = base64.b64encode(generate_ssh_key().private_pem.encode()).decode()
NOW = "2025-06-01T12:00:00Z"


def secret(name: str = "pi-ssh", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": owner(uid=UID)},
        "type": "kubernetes.io/ssh-auth",
        "data": data,
    }


def live(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "uid": "uid-secret", "resourceVersion": "7"}}


# -- the helper ----------------------------------------------------------------------------------------
def test_a_secrets_values_are_masked_and_nothing_else() -> None:
    obj = {**secret(**{"ssh-privatekey": PRIVATE_B64, "ssh-publickey": PUBLIC_B64}), "stringData": {"p": "x"}}
    hidden = redact.hide_object(obj)
    assert hidden["data"] == {"ssh-privatekey": redact.HIDDEN, "ssh-publickey": redact.HIDDEN}
    assert hidden["stringData"] == {"p": redact.HIDDEN}
    assert {k: v for k, v in hidden.items() if k not in ("data", "stringData")} == {
        k: v for k, v in obj.items() if k not in ("data", "stringData")
    }
    assert obj["data"]["ssh-privatekey"] == PRIVATE_B64  # the input is left as it was
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert redact.hide_object(config_map) is config_map
    # Applied by mistake, the mask is refused: the API server decodes a Secret's data as base64.
    with pytest.raises(binascii.Error):
        base64.b64decode(redact.HIDDEN, validate=True)
    assert "--show-secrets" in redact.HIDDEN


def test_json_patch_ops_that_write_a_secrets_values_are_masked() -> None:
    ops = [
        {"op": "replace", "path": "/data/ssh-privatekey", "value": PRIVATE_B64},
        {"op": "add", "path": "/data", "value": {"ssh-privatekey": PRIVATE_B64}},
        {"op": "test", "path": "/stringData/k", "value": "plain"},
        {"op": "add", "path": "", "value": {"kind": "Secret", "data": {"ssh-privatekey": PRIVATE_B64}}},
        {"op": "remove", "path": "/data/ssh-publickey"},
        {"op": "add", "path": "/metadata/labels/a", "value": "b"},
    ]
    assert redact.hide_json_patch(ops) == [
        {"op": "replace", "path": "/data/ssh-privatekey", "value": redact.HIDDEN},
        {"op": "add", "path": "/data", "value": {"ssh-privatekey": redact.HIDDEN}},
        {"op": "test", "path": "/stringData/k", "value": redact.HIDDEN},
        {"op": "add", "path": "", "value": {"kind": "Secret", "data": {"ssh-privatekey": redact.HIDDEN}}},
        {"op": "remove", "path": "/data/ssh-publickey"},
        {"op": "add", "path": "/metadata/labels/a", "value": "b"},
    ]


def test_a_message_loses_every_form_of_the_values_its_request_carried() -> None:
    body = secret(**{"ssh-privatekey": PRIVATE_B64})
    line = KEY.private_pem.splitlines()[2]
    text = f"denied: {PRIVATE_B64} / {KEY.private_pem} / {line}"
    hidden = redact.hide_in_text(text, body)
    assert leaked(hidden, FORMS) == [] and hidden.startswith("denied: ")


# -- render: one Secret per job, mounted by that job's pods only ----------------------------------------
def _job(name: str, uid: str) -> dict[str, Any]:
    j = job()
    j["metadata"] = {**j["metadata"], "name": name, "uid": uid}
    return j


def test_each_jobs_key_is_in_its_one_secret_and_its_pods_mount_only_that() -> None:
    keys = {"alpha": generate_ssh_key(), "beta": generate_ssh_key()}
    uids = {"alpha": "uid-alpha", "beta": "uid-beta"}
    for name, key in keys.items():
        children = render(_job(name, uids[name]), observed(key=key), Config())
        (own,) = by_kind(children, "Secret")
        assert own["metadata"]["name"] == f"{name}-ssh" and own["type"] == "kubernetes.io/ssh-auth"
        assert base64.b64decode(own["data"]["ssh-privatekey"]).decode() == key.private_pem
        templates = [p["spec"] for p in by_kind(children, "Pod")]
        templates += [j["spec"]["template"]["spec"] for j in by_kind(children, "Job")]
        assert len(templates) == 3  # two workers and the launcher
        for spec in templates:
            assert secret_refs(spec) == {f"{name}-ssh"}
        for child in children:
            text = json.dumps(child)
            for other, other_key in keys.items():
                found = leaked(text, key_forms(other_key.private_pem))
                expect_here = child is own and other == name
                assert bool(found) == expect_here, (name, child["kind"], child["metadata"]["name"], other)


# -- the differ's debug log ----------------------------------------------------------------------------
def test_the_differs_debug_log_of_a_drifted_secret_shows_no_value(caplog: pytest.LogCaptureFixture) -> None:
    """With a policy that compares a Secret's data (the engine's default), a drifted value is logged as
    changed, masked."""
    caplog.set_level(logging.DEBUG, logger="reconcile.engine.differ")
    desired = secret(**{"ssh-privatekey": PRIVATE_B64, "ssh-publickey": PUBLIC_B64})
    drifted = live(secret(**{"ssh-privatekey": OTHER_B64}))
    result = plan([desired], [drifted], Policy(field_manager="m"), UID)
    (patch,) = result.patches
    assert {"op": "replace", "path": "/data/ssh-privatekey", "value": PRIVATE_B64} in patch.json_patch
    (line,) = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("drift in Secret ns/pi-ssh")
    ]
    assert leaked(line, FORMS) == [], f"the differ's debug log holds the key: {leaked(line, FORMS)}"
    assert OTHER_B64 not in line and PUBLIC_B64 not in line
    diff = json.loads(line.split(": ", 1)[1])
    (changed,) = diff["values_changed"].values()
    assert changed["old_value"] != changed["new_value"]  # still told apart, by their tags
    assert changed["new_value"].startswith(redact.HIDDEN)


# -- the executor's failures: log line and event --------------------------------------------------------
def test_a_refused_secret_write_is_logged_and_told_without_its_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An admission webhook may quote what it refuses."""
    caplog.set_level(logging.DEBUG)
    body = secret(**{"ssh-privatekey": PRIVATE_B64, "ssh-publickey": PUBLIC_B64})
    pem_line = KEY.private_pem.splitlines()[1]
    refusal = WriteFailed(
        422,
        f"admission webhook denied the request: data[ssh-privatekey] {PRIVATE_B64} holds {KEY.private_pem}",
        reason="Invalid",
        causes=[{"field": "data[ssh-privatekey]", "message": f"Invalid value: {pem_line}"}],
    )
    writer = RecordingWriter(refuse=lambda request: refusal)
    key = ObjectKey("", "Secret", "ns", "pi-ssh")
    result = execute(Plan(creates=(Create(key, "v1", body),)), writer, "m")
    (failure,) = result.failures
    (event,) = result.events
    assert failure.message.startswith("admission webhook denied the request") and failure.causes
    surfaces = {
        "failure": failure.message + repr(failure.causes),
        "event": event.message,
        "log": caplog.text,
    }
    for surface, text in surfaces.items():
        assert leaked(text, FORMS) == [], f"{surface}: holds the key: {leaked(text, FORMS)}"


# -- `mpijob plan`'s report --------------------------------------------------------------------------
def _report(the_plan: Plan) -> dict[str, Any]:
    return {
        "mpijob": "ns/pi",
        "status": [],
        "plan": the_plan.to_dict(),
        "summary": str(the_plan),
        "writes": 1,
    }


def _outputs(reports: list[dict[str, Any]]) -> dict[str, str]:
    return {fmt: plan_command._output(reports, fmt) for fmt in ("yaml", "json", "text")}


def test_the_plan_of_a_new_job_shows_the_secret_it_creates_without_the_key() -> None:
    memory = JobMemory(uid=UID, fresh_ssh_key=KEY)
    report = plan_command.compute(job(), [], memory, Config(), datetime(2025, 6, 1, tzinfo=UTC))
    (created,) = [c for c in report["plan"]["creates"] if c["object"] == "Secret ns/pi-ssh"]
    assert created["body"]["data"] == {"ssh-privatekey": redact.HIDDEN, "ssh-publickey": redact.HIDDEN}
    for fmt, text in _outputs([report]).items():
        assert leaked(text, FORMS) == [], f"mpijob plan -o {fmt}: holds the key: {leaked(text, FORMS)}"


def test_the_plan_of_a_drifted_secret_shows_its_patches_without_the_key() -> None:
    """The MPIJob policy never patches the Secret's data; a policy that does (the engine's default) must
    not print the values its body and JSON patch carry."""
    desired = secret(**{"ssh-privatekey": PRIVATE_B64, "ssh-publickey": PUBLIC_B64})
    the_plan = plan(
        [desired], [live(secret(**{"ssh-privatekey": OTHER_B64}))], Policy(field_manager="m"), UID
    )
    (patch,) = the_plan.patches
    assert patch.body is not None and patch.body["data"]["ssh-privatekey"] == PRIVATE_B64
    report = _report(the_plan)
    (entry,) = report["plan"]["patches"]
    assert {"op": "replace", "path": "/data/ssh-privatekey", "value": redact.HIDDEN} in entry["jsonPatch"]
    for fmt, text in _outputs([report]).items():
        assert leaked(text, FORMS) == [], f"mpijob plan -o {fmt}: holds the key: {leaked(text, FORMS)}"
        assert OTHER_B64 not in text, fmt


# -- `mpijob render` ---------------------------------------------------------------------------------
@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "id_ecdsa.pem"
    path.write_text(KEY.private_pem)
    return path


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_render_masks_the_key_unless_asked_to_show_it(key_file: Path, tmp_path: Path, fmt: str) -> None:
    mpijob = str(GOLDEN / "openmpi-pi" / "mpijob.yaml")
    fresh = [mpijob, "--ssh-key", str(key_file), "--now", NOW, "-o", fmt]
    # the live Secret, as `--observed` reads it: render takes its data
    golden_job = yaml.safe_load((GOLDEN / "openmpi-pi" / "mpijob.yaml").read_text())
    own = secret(**{"ssh-privatekey": PRIVATE_B64, "ssh-publickey": PUBLIC_B64})
    own["metadata"] = {
        **own["metadata"],
        "namespace": "default",
        "ownerReferences": owner(uid=golden_job["metadata"]["uid"]),
    }
    observed_file = tmp_path / "observed.yaml"
    observed_file.write_text(yaml.safe_dump([own]))
    from_live = [mpijob, "--observed", str(observed_file), "--now", NOW, "-o", fmt]
    for args in (fresh, from_live):
        code, out, err = run_cli(args)
        assert code == 0, err
        assert leaked(out, FORMS) == [], f"mpijob render {args}: holds the key: {leaked(out, FORMS)}"
        docs = json.loads(out)["items"] if fmt == "json" else list(yaml.safe_load_all(out))
        (shown,) = [d for d in docs if d and d["kind"] == "Secret"]
        assert shown["data"] == {"ssh-privatekey": redact.HIDDEN, "ssh-publickey": redact.HIDDEN}
        code, out, err = run_cli([*args, "--show-secrets"])
        assert code == 0, err
        assert "base64" in leaked(out, FORMS)  # proves the search above finds the key where it is
