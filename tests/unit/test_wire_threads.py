"""L0: many threads share one ``Kube`` (as the workers, informers and leader election do): every answer is
its own request's, no connection carries two requests at once, and connections are reused.

Under CPython's GIL each list operation is atomic and threads switch only at a few points, so without the
stack's lock the race between its check and its pop (two threads given one connection, or a pop from an
empty stack) seldom shows. The test's stack lets other threads run inside each of its operations, as a
free-threaded build may, so a missing lock fails the test on every run.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, SupportsIndex

import pytest

from reconcile.runtime.kube import Kube
from tests.unit.loopback import Listener, client, read_request

THREADS = 16
EACH = 40
WATCH_EVERY = 10


class SwitchingStack(list[Any]):
    """An idle stack whose every operation lets other threads run midway."""

    def __len__(self) -> int:
        time.sleep(0)
        return super().__len__()

    def pop(self, index: SupportsIndex = -1) -> Any:
        item = self[index]
        time.sleep(0)
        del self[index]
        return item

    def append(self, item: Any) -> None:
        time.sleep(0)
        super().append(item)


class EchoServer(Listener):
    """Answers each request, after ``delay``, with its own method, target and body; counts the connections
    and every request that arrived on a connection still busy with an earlier one."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.accepted = 0
        self.requests = 0
        self.overlaps = 0
        self._lock = threading.Lock()
        super().__init__(backlog=THREADS * 4)

    def handle(self, conn: socket.socket) -> None:
        with self._lock:
            self.accepted += 1
        buf = b""
        with conn:
            while (got := read_request(conn, buf)) is not None:
                head, body, buf = got
                method, target = head.decode().split(" ")[:2]
                time.sleep(self.delay)  # the request in flight a while: time for another to come on it
                busy = bool(buf) or bool(select.select([conn], [], [], 0)[0])
                sent = json.loads(body) if body else None
                data = json.dumps({"method": method, "target": target, "body": sent}).encode()
                with self._lock:
                    self.requests += 1
                    self.overlaps += busy
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))


@pytest.fixture
def server() -> Iterator[EchoServer]:
    s = EchoServer(delay=0.001)
    yield s
    s.close()


def test_threads_sharing_one_kube_never_share_a_connection(server: EchoServer) -> None:
    kube = Kube(client(server.url))
    kube._wire._idle = SwitchingStack()
    wrong: list[str] = []
    failed: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(EACH):
                path = f"/api/v1/namespaces/t{t}/pods/p{i}"
                if i % WATCH_EVERY == WATCH_EVERY - 1:  # a watch takes a connection too, and closes it
                    lines = list(kube.stream_lines(path, {"watch": True}, (5, 5)))
                    got = json.loads(lines[0]) if len(lines) == 1 else {"lines": lines}
                    want = {"method": "GET", "target": f"{path}?watch=true", "body": None}
                elif i % 2:
                    got = kube.request("PUT", path, body={"t": t, "i": i}, timeout=5)
                    want = {"method": "PUT", "target": path, "body": {"t": t, "i": i}}
                else:
                    got = kube.request("GET", path, timeout=5)
                    want = {"method": "GET", "target": path, "body": None}
                if got != want:
                    wrong.append(f"{want} answered with {got}")
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not failed, failed[:3]
    assert not wrong, wrong[:3]
    assert server.requests == THREADS * EACH
    assert server.overlaps == 0  # no connection carried a request while an earlier one was unanswered
    # at most one kept-alive connection per thread, and one per watch: the rest were reused
    assert server.accepted <= THREADS + THREADS * (EACH // WATCH_EVERY)
