"""The one poll-until-true loop of the tests and the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def not_found(exc: BaseException) -> bool:
    """An API error 404 (``reconcile.runtime.kube.ApiError`` or the official client's ``ApiException``)."""
    return getattr(exc, "status", None) == 404


def wait_for(
    check: Callable[[], Any],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.1,
    *,
    describe: Callable[[], str] | None = None,
    alive: Callable[[], bool] | None = None,
    ignore: Callable[[BaseException], bool] | None = None,
) -> Any:
    """Poll ``check`` until it returns something true (returned) or ``timeout`` passes (AssertionError
    with the last value and ``describe()``). ``alive``: fail at once when it turns false (the operator
    died); ``ignore``: exceptions of ``check`` to treat as "not yet" (default: a 404, not there yet)."""
    ignore = ignore or not_found
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except Exception as exc:
            if not ignore(exc):
                raise
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            break
        if alive is not None and not alive():
            raise AssertionError(f"the operator died while waiting for {what}")
        time.sleep(interval)
    detail = f"\n{describe()}" if describe is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}{detail}")
