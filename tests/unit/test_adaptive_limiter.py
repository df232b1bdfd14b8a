"""The API client's adaptive limiter: no limit while the server keeps up; 429/Retry-After and
rising latency slow it down; a pinned --kube-api-qps still limits. A fake clock, no sleeping."""

from __future__ import annotations

import pytest

from reconcile.runtime.kube import MAX_RETRIES, POD, ApiError, Kube
from reconcile.runtime.ratelimit import (
    LATENCY_FLOOR_QPS,
    MIN_QPS,
    RETRY_AFTER_MAX,
    AdaptiveLimiter,
    retry_after_seconds,
)
from tests.unit.fakes import Clock
from tests.unit.loopback import ApiServer, client


def limiter(ceiling: float | None = None, burst: int = 10) -> tuple[AdaptiveLimiter, Clock, list[float]]:
    clock, slept = Clock(), []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.t += s

    return AdaptiveLimiter(ceiling, burst, clock=clock, sleep=sleep), clock, slept


def run(lim: AdaptiveLimiter, clock: Clock, seconds: float, every: float, latency: float = 0.005) -> int:
    """Requests sent back to back (one every ``every`` s of work) for ``seconds``; how many were sent."""
    sent, end = 0, clock.t + seconds
    while clock.t < end:
        lim.wait()
        clock.t += every
        lim.observe(latency, 201)
        sent += 1
    return sent


def test_no_limit_by_default():
    lim, clock, slept = limiter()
    assert run(lim, clock, 2.0, 0.001) in (2000, 2001)  # float steps
    assert slept == [] and lim.rate is None


def test_pinned_qps_limits_as_the_fixed_bucket():
    lim, clock, _ = limiter(5, 10)
    sent = run(lim, clock, 10.0, 0.0001)
    assert 55 <= sent <= 61  # burst 10 then 5 per second
    assert lim.rate == 5


def test_429_pauses_for_retry_after_and_halves_the_rate():
    lim, clock, slept = limiter()
    run(lim, clock, 1.0, 0.01)  # 100 requests per second achieved
    lim.observe(0.005, 429, 3.0)
    assert lim.throttled == 1
    assert lim.rate == pytest.approx(50, rel=0.05)
    assert lim.wait() == pytest.approx(3.0)  # everyone waits Retry-After
    assert slept == [pytest.approx(3.0)]


def test_a_burst_of_429s_is_one_signal():
    lim, clock, _ = limiter()
    run(lim, clock, 1.0, 0.01)
    for _ in range(20):
        lim.observe(0.005, 429, 1.0)
    assert lim.rate == pytest.approx(50, rel=0.05)
    assert lim.throttled == 20


def test_repeated_429s_never_go_below_the_floor_and_retry_after_is_capped():
    lim, clock, _ = limiter()
    for _ in range(30):
        lim.observe(0.005, 429, 10_000)
        clock.t += 1.0
    assert lim.rate == MIN_QPS
    assert lim.reserve() <= RETRY_AFTER_MAX


def test_a_client_that_went_quiet_is_not_held_to_an_old_429s_rate():
    """After 429s at start-up a client that sends a request now and then gets its limit back with time:
    it is not paced at the floor until it has sent enough requests to grow out of it."""
    lim, clock, _ = limiter()
    lim.observe(0.005, 429, 1.0)
    assert lim.rate == MIN_QPS
    clock.t += 2.0
    assert lim.reserve() == 0.0
    assert lim.rate == pytest.approx(MIN_QPS * 1.25**2)
    clock.t += 30.0  # quiet: no request, no signal
    assert lim.reserve() == 0.0
    assert lim.rate is None
    assert [lim.reserve() for _ in range(10)] == [0.0] * 10


def test_429_without_retry_after_pauses_a_second():
    lim, _, _ = limiter()
    lim.observe(0.005, 429, None)
    assert lim.reserve() == pytest.approx(1.0)


def test_5xx_counts_only_with_retry_after():
    lim, clock, _ = limiter()
    run(lim, clock, 1.0, 0.01)
    lim.observe(0.005, 500, None)
    assert lim.rate is None
    lim.observe(0.005, 503, 2.0)
    assert lim.rate is not None and lim.throttled == 0


def test_rising_latency_backs_off_and_recovers_to_no_limit():
    lim, clock, _ = limiter()
    run(lim, clock, 2.0, 0.01, latency=0.01)  # baseline 10 ms
    assert lim.rate is None
    run(lim, clock, 3.0, 0.01, latency=8.0)  # the server struggles: 800x slower answers
    assert lim.rate is not None and lim.rate >= LATENCY_FLOOR_QPS
    slowed = lim.rate
    run(lim, clock, 1.0, 0.01, latency=8.0)
    assert lim.rate <= slowed  # still slow: no increase
    run(lim, clock, 60.0, 0.001, latency=0.01)  # healthy again
    assert lim.rate is None


def test_small_latency_changes_are_noise():
    lim, clock, _ = limiter()
    run(lim, clock, 2.0, 0.01, latency=0.002)
    run(lim, clock, 2.0, 0.01, latency=0.5)  # 250x, but half a second is a busy server, not a struggling one
    assert lim.rate is None
    run(lim, clock, 5.0, 0.01, latency=2.0)  # as is 2 s: a CPU-bound server whose only client we are
    assert lim.rate is None


def test_a_lasting_slowdown_becomes_the_baseline():
    lim, clock, _ = limiter()
    run(lim, clock, 2.0, 0.01, latency=0.01)
    run(lim, clock, 600.0, 0.05, latency=8.0)  # slower for good: the baseline follows within minutes
    assert lim.rate is None


def test_pinned_qps_is_never_exceeded_on_recovery():
    lim, clock, _ = limiter(20, 20)
    run(lim, clock, 2.0, 0.001)
    lim.observe(0.005, 429, 1.0)
    assert lim.rate is not None and lim.rate < 20
    run(lim, clock, 60.0, 0.001)
    assert lim.rate == 20


def test_bad_pins_are_refused():
    with pytest.raises(ValueError):
        AdaptiveLimiter(0, 10)
    with pytest.raises(ValueError):
        AdaptiveLimiter(5, 0)


@pytest.mark.parametrize(
    ("header", "want"), [("3", 3.0), (" 1 ", 1.0), ("", None), ("soon", None), ("-1", None)]
)
def test_retry_after_header(header, want):
    assert retry_after_seconds(header) == want


# -- through Kube: a throttled request is retried after Retry-After -------------------------------------
def throttled(n: int, retry_after: str = "2") -> list[tuple[int, dict[str, str], bytes]]:
    return [(429, {"Retry-After": retry_after}, b"{}")] * n


def test_kube_retries_a_429_after_retry_after(server: ApiServer):
    server.answers = throttled(2)
    seen: list[tuple[str, str, str]] = []
    kube = Kube(client(server.url), on_request=lambda *r: seen.append(r))
    slept: list[float] = []
    kube.limiter._sleep = slept.append
    out = kube.create(POD, "a", {"metadata": {"name": "p"}})
    assert out["path"] == "/api/v1/namespaces/a/pods" and [s["method"] for s in server.seen] == ["POST"] * 3
    assert [code for _, _, code in seen] == ["429", "429", "200"]
    assert len(slept) == 2 and all(s == pytest.approx(2.0, abs=0.1) for s in slept)
    assert kube.limiter.throttled == 2


def test_kube_gives_up_after_max_retries(server: ApiServer):
    server.answers = throttled(MAX_RETRIES + 5, retry_after="0")
    kube = Kube(client(server.url))
    kube.limiter._sleep = lambda s: None
    with pytest.raises(ApiError) as err:
        kube.replace(POD, {"metadata": {"namespace": "a", "name": "p"}})
    assert err.value.status == 429 and len(server.seen) == MAX_RETRIES + 1


def test_kube_never_retries_a_watch(server: ApiServer):
    server.answers = throttled(1)
    kube = Kube(client(server.url))
    kube.limiter._sleep = lambda s: None
    with pytest.raises(ApiError) as err:
        list(kube.stream_lines(POD.path(None), {"watch": True}, (1, 5)))
    assert err.value.status == 429 and len(server.seen) == 1
    assert kube.limiter.reserve() > 0  # but the pause it asked for holds for every request
