"""A byte relay between TCP ports and Unix sockets, one process for several routes.

Inside the sandbox it serves the `kubernetes` Service address and a socket file in front of the
apiserver's loopback port; on the machine it serves that same port on the machine's loopback in front
of the socket file. A file-system socket is seen from every network namespace, so the machine reaches
the apiserver without any link into the sandbox.

Usage: python -m localcluster.sandbox.relay LISTEN=TARGET ...   (each tcp:HOST:PORT or unix:PATH)
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError):
        writer.close()


async def _open(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    kind, _, rest = address.partition(":")
    if kind == "unix":
        return await asyncio.open_unix_connection(rest)
    host, port = rest.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _listen(address: str, target: str) -> asyncio.base_events.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await _open(target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    kind, _, rest = address.partition(":")
    if kind == "unix":
        Path(rest).unlink(missing_ok=True)
        return await asyncio.start_unix_server(handle, rest)
    host, port = rest.rsplit(":", 1)
    return await asyncio.start_server(handle, host, int(port))


def parse_route(text: str) -> tuple[str, str]:
    listen, sep, target = text.partition("=")
    for address in (listen, target):
        kind, _, rest = address.partition(":")
        if not sep or kind not in ("tcp", "unix") or not rest:
            raise ValueError(f"route {text!r}: want LISTEN=TARGET, each tcp:HOST:PORT or unix:PATH")
    return listen, target


async def serve(routes: list[tuple[str, str]]) -> None:
    servers = [await _listen(listen, target) for listen, target in routes]
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str]) -> int:
    try:
        routes = [parse_route(a) for a in argv]
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not routes:
        print(__doc__, file=sys.stderr)
        return 2
    asyncio.run(serve(routes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
