"""Loopback stand-ins for an API server (HTTP or HTTPS) and for a CONNECT proxy, for L0 tests of ``Kube``;
the listener and request reader that raw-socket servers of those tests build on."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient, Configuration

from localcluster.pki import CertificateAuthority


class ApiServer:
    """Answers each request with the next (code, headers, body) queued, else 200 and the request echoed;
    ``delay`` seconds after a request arrives. Every request is recorded in ``seen`` as it arrives."""

    def __init__(self, tls: ssl.SSLContext | None = None, delay: float = 0.0) -> None:
        self.seen: list[dict[str, Any]] = []
        self.answers: list[tuple[int, dict[str, str], bytes]] = []
        self.delay = delay
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                outer.seen.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                        "at": time.monotonic(),
                        "client": dict(x[0] for x in peer["subject"]) if peer else None,
                    }
                )
                time.sleep(outer.delay)
                if outer.answers:
                    code, headers, data = outer.answers.pop(0)
                else:
                    code, headers = 200, {}
                    sent = json.loads(body) if body else None
                    data = json.dumps({"path": self.path, "sent": sent}).encode()
                self.send_response(code)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def client(url: str, token: str = "Bearer t0k3n") -> ApiClient:
    cfg = Configuration()
    cfg.host = url
    cfg.api_key = {"BearerToken": token}
    return ApiClient(cfg)


class Pki:
    """A CA, a serving certificate for 127.0.0.1 and a client certificate, as files under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.ca = CertificateAuthority.create()
        self.dir = directory
        self.ca_file = self._write("ca.crt", self.ca.cert_pem)
        cert, key = self.ca.issue("apiserver", server_names=("127.0.0.1",))
        self.server_cert, self.server_key = self._write("server.crt", cert), self._write("server.key", key)
        self.client_cert, self.client_key = self.ca.issue("operator", client=True)

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        return path

    def proxy_args(self) -> dict[str, Path]:
        """The files a chaos proxy between the client and a server of this CA takes (``TlsProxy``)."""
        return {
            "ca": self.ca_file,
            "server_cert": self.server_cert,
            "server_key": self.server_key,
            "client_cert": self._write("client.crt", self.client_cert),
            "client_key": self._write("client.key", self.client_key),
        }

    def server_context(self, *, require_client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            ctx.load_verify_locations(self.ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def kubeconfig(self, server: str, *, ca: bool = True, **cluster: Any) -> Path:
        """A kubeconfig for ``server`` with the client certificate (and the CA unless not ``ca``);
        ``cluster``: more keys of its cluster entry (``proxy-url``, ``insecure-skip-tls-verify``)."""

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        entry: dict[str, Any] = {"server": server, **cluster}
        if ca:
            entry["certificate-authority-data"] = b64(self.ca.cert_pem)
        user = {"client-certificate-data": b64(self.client_cert), "client-key-data": b64(self.client_key)}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": entry}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        path = self.dir / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path


class Listener:
    """A loopback TCP server that hands each connection it accepts to ``handle``, on a thread of its own,
    until closed. A subclass sets up its own state before calling ``__init__``: accepting starts there."""

    def __init__(self, backlog: int | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()


def read_request(conn: socket.socket, buf: bytes = b"") -> tuple[bytes, bytes, bytes] | None:
    """The next request on ``conn``, after ``buf`` (what was read of it already): its head, its
    Content-Length body and what arrived after them; None when the client closed first."""
    while b"\r\n\r\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, buf = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buf) < length:
        buf += conn.recv(65536)
    return head, buf[:length], buf[length:]


class ConnectProxy(Listener):
    """An HTTP proxy that only tunnels (CONNECT); records each CONNECT request's head."""

    def __init__(self) -> None:
        self.connects: list[bytes] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                conn.close()
                return
            head += chunk
        self.connects.append(head)
        method, target = head.split(b" ", 2)[:2]
        if method != b"CONNECT":
            conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            conn.close()
            return
        host, _, port = target.decode().rpartition(":")
        upstream = socket.create_connection((host, int(port)))
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        back = threading.Thread(target=_relay, args=(upstream, conn), daemon=True)
        back.start()
        _relay(conn, upstream)
        back.join(5)
        conn.close()
        upstream.close()


def _relay(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
