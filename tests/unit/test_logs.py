"""L0: JSON logs carry the extra fields."""

from __future__ import annotations

import io
import json
import logging

from reconcile.runtime import logs


def test_json_logs_carry_extra_fields():
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logs.JSONFormatter())
    logger = logging.getLogger("test-json")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("sync failed", extra={"key": "ns/pi", "error": "boom"})
    line = json.loads(buf.getvalue())
    assert line["msg"] == "sync failed"
    assert line["key"] == "ns/pi" and line["level"] == "warning"
