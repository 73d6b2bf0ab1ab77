"""Clients attacking a dashboard (``cmdstalk --http``), each run as its own process, so
that what they cost is theirs and not the measuring process's (issue #27).

``idle HOST PORT COUNT``: opens COUNT connections and sends nothing; prints ``ready`` once
every handshake is done, holds them until stdin closes (or SIGTERM), prints a JSON
summary. ``flood URL CLIENTS [--interval S]``: CLIENTS keep-alive clients each GETting
URL (``/api/state``) again as soon as answered (or S seconds later), reconnecting when
refused or closed; prints ``ready`` once each has had an answer or a refusal, and the
summary (answers by status, connection errors) when stdin closes or on SIGTERM.

Used by ``benchmarks/dashboard_attack.py`` and by ``tests/dashboard/test_attacks.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import signal
import socket
import sys
import time
import urllib.parse
from collections.abc import Awaitable, Sequence

Counts = collections.Counter[str]


async def _stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def stop() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_signal_handler(signal.SIGTERM, stop)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    eof = asyncio.ensure_future(reader.read())
    eof.add_done_callback(lambda _: stop())
    await done
    eof.cancel()


async def idle(host: str, port: int, count: int) -> Counts:
    """``count`` silent connections, held until told to stop. ``ready`` once each one's
    handshake is done (the server accepted it, or will from its backlog) or failed."""
    loop = asyncio.get_running_loop()
    counts: Counts = collections.Counter()
    sockets = [socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
               for _ in range(count)]  # fmt: skip

    async def connect(sock: socket.socket) -> None:
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, (host, port))
            counts["connected"] += 1
        except OSError as e:
            counts[f"connect error: {e.strerror}"] += 1

    async def connect_all() -> None:
        # One at a time: a burst beyond a small listen backlog is dropped by some network
        # stacks (gVisor's) while the client believes it connected.
        for sock in sockets:
            await connect(sock)
        print("ready", flush=True)

    await _until_stopped(connect_all())
    for sock in sockets:
        sock.close()
    return counts


async def _until_stopped(attack: Awaitable[None]) -> None:
    """Run ``attack`` (and hold what it opened) until stdin closes or SIGTERM comes, even
    while it is still getting ready (a server that stopped accepting never lets it)."""
    stopped = asyncio.ensure_future(_stdin_closed())
    attacking = asyncio.ensure_future(attack)
    await asyncio.wait([stopped, attacking], return_when=asyncio.FIRST_COMPLETED)
    if not stopped.done():
        await stopped
    attacking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await attacking


async def _one_client(
    url: urllib.parse.SplitResult, interval: float, counts: Counts, first: asyncio.Event
) -> None:
    request = (f"GET {url.path or '/'} HTTP/1.1\r\nHost: {url.netloc}\r\n"
               "Accept: application/json\r\n\r\n").encode()  # fmt: skip
    while True:
        try:
            reader, writer = await asyncio.open_connection(url.hostname, url.port)
        except OSError:
            counts["connect error"] += 1
            first.set()
            await asyncio.sleep(max(interval, 0.05))
            continue
        try:
            while True:
                writer.write(request)
                status, close = await _answer(reader)
                counts[str(status)] += 1
                first.set()
                if close:
                    break
                if interval:
                    await asyncio.sleep(interval)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            counts["closed"] += 1
            first.set()
        finally:
            writer.close()
        await asyncio.sleep(interval)


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    status = int(head.split(" ", 2)[1])
    length = 0
    for line in head.split("\r\n"):
        if line.startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    await reader.readexactly(length)
    return status, "connection: close" in head


async def flood(url: str, clients: int, interval: float) -> Counts:
    """``clients`` pollers of ``url`` until told to stop; ``ready`` once each one has had
    an answer or was refused."""
    counts: Counts = collections.Counter()
    parts = urllib.parse.urlsplit(url)
    firsts = [asyncio.Event() for _ in range(clients)]
    started = time.monotonic()

    async def poll() -> None:
        tasks = [asyncio.ensure_future(_one_client(parts, interval, counts, first))
                 for first in firsts]  # fmt: skip
        try:
            await asyncio.gather(*(first.wait() for first in firsts))
            print("ready", flush=True)
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    await _until_stopped(poll())
    counts["seconds"] = round(time.monotonic() - started)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="attack", required=True)
    p_idle = sub.add_parser("idle")
    p_idle.add_argument("host")
    p_idle.add_argument("port", type=int)
    p_idle.add_argument("count", type=int)
    p_flood = sub.add_parser("flood")
    p_flood.add_argument("url")
    p_flood.add_argument("clients", type=int)
    p_flood.add_argument("--interval", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.attack == "idle":
        counts = asyncio.run(idle(args.host, args.port, args.count))
    else:
        counts = asyncio.run(flood(args.url, args.clients, args.interval))
    print(json.dumps(dict(counts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
