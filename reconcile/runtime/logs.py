"""Structured logging on the standard library: one JSON object per line, or readable text.

Fields passed with ``extra={...}`` become top-level keys of the JSON object.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{ts} {record.levelname[0]} {record.name}: {record.getMessage()}" + (
            f" {extras}" if extras else ""
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(fmt: str = "json", level: str = "info", file: str = "", also_stderr: bool = False) -> None:
    """Log to stderr, or to `file` (klog's -logtostderr=false with -log_file/-log_dir), and then to stderr
    as well with `also_stderr` (-alsologtostderr)."""
    handlers: list[logging.Handler] = []
    if file:
        handlers.append(logging.FileHandler(file, encoding="utf-8"))
    if not file or also_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level.upper())
    # urllib3's debug lines and per-attempt retry warnings would drown ours; failures are reported by us
    logging.getLogger("urllib3").setLevel(max(logging.ERROR, root.level))
    # An exception nobody caught is still one log line in the chosen format, traceback inside.
    sys.excepthook = _log_uncaught
    threading.excepthook = lambda a: _log_uncaught(a.exc_type, a.exc_value, a.exc_traceback, a.thread)


def _log_uncaught(exc_type: Any, value: Any, tb: Any, thread: threading.Thread | None = None) -> None:
    if issubclass(exc_type, KeyboardInterrupt | SystemExit):
        return
    extra = {"thread": thread.name} if thread is not None else {}
    logging.getLogger(__name__).critical("uncaught exception", exc_info=(exc_type, value, tb), extra=extra)
