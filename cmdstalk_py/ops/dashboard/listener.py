"""``Listener``: the dashboard's HTTP/1.1 server, on an asyncio event loop it is given.

Bounded in everything a client controls, so that no client can cost the jobs anything:

- connections: at most ``Admission.limit``, and none while the process is short of
  descriptors; one over is accepted and closed at once (with a 503 when it can take it);
- accepts and requests per second (``Budget``): a flood waits, paced, instead of spinning;
- bytes: a request head of ``MAX_HEAD``, a body of ``MAX_BODY``;
- time: a whole request (the keep-alive wait before it included) within
  ``REQUEST_TIMEOUT``, an answer taken by the client within ``WRITE_TIMEOUT``;
- log lines: what clients cause is logged through ``LogThrottle``, one line per kind per
  10 s, never a raw traceback on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import replace

from cmdstalk_py.ops.dashboard.admission import (
    ACCEPT_BURST,
    ACCEPTS_PER_SECOND,
    REQUEST_BURST,
    REQUESTS_PER_SECOND,
    Admission,
    Budget,
)
from cmdstalk_py.ops.dashboard.throttle import LogThrottle
from cmdstalk_py.ops.dashboard.wire import (
    MAX_HEAD,
    BadRequest,
    Request,
    Response,
    parse_head,
    render,
)

log = logging.getLogger("cmdstalk.dashboard")

REQUEST_TIMEOUT = 15.0
WRITE_TIMEOUT = 10.0
LINGER_SECONDS, LINGER_BYTES = 2.0, 1 << 20  # after an answer to a request cut short
ACCEPT_RETRY = 0.5  # seconds before accepting again when accept() itself failed (EMFILE)
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

Handler = Callable[[Request], Awaitable[Response]]


def error_response(status: int, message: str, close: bool = False) -> Response:
    """A JSON ``{"error": message}`` answer."""
    return Response(status, json.dumps({"error": message}).encode("ascii"), close=close)


class Listener:
    """Serves ``handler`` on the listening socket ``sock`` once ``start()``ed on a loop.

    ``headers`` go on every answer, the listener's own (400, 431, 503) included.
    """

    def __init__(
        self,
        sock: socket.socket,
        handler: Handler,
        headers: dict[str, str],
        admission: Admission | None = None,
    ) -> None:
        self._sock = sock
        self._handler = handler
        self._headers = headers
        self.admission = admission if admission is not None else Admission()
        self._accepts = Budget(ACCEPTS_PER_SECOND, ACCEPT_BURST)
        self._requests = Budget(REQUESTS_PER_SECOND, REQUEST_BURST)
        self._throttle = LogThrottle(log)
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Begin accepting, on the running loop (call it from the loop's thread)."""
        self._sock.setblocking(False)
        self._spawn(self._accept_loop())

    async def aclose(self) -> None:
        """Stop accepting, end every connection, close the socket."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sock.close()

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            delay = self._accepts.wait()
            if delay:
                await asyncio.sleep(delay)
            try:
                conn, peer = await loop.sock_accept(self._sock)
            except OSError as e:  # out of descriptors (EMFILE) or buffers: jobs come first
                self._throttle.log("accept", logging.WARNING,
                                   "dashboard: cannot accept a connection: %s", e)  # fmt: skip
                await asyncio.sleep(ACCEPT_RETRY)
                continue
            refused = self.admission.admit(conn.fileno())
            if refused is not None:
                self._refuse(conn, refused)
            else:
                self._spawn(self._connection(conn, _peer(peer)))

    def _refuse(self, conn: socket.socket, reason: str) -> None:
        self._throttle.log("refused", logging.WARNING,
                           "dashboard: refused a connection: %s", reason)  # fmt: skip
        with contextlib.suppress(OSError):
            conn.setblocking(False)
            conn.send(BUSY)  # a fresh socket's buffer takes it, or the client gets a reset
        conn.close()

    async def _connection(self, conn: socket.socket, peer: str) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_HEAD)
        except OSError:
            conn.close()
            self.admission.release()
            return
        try:
            await self._exchange(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError) as e:
            self._throttle.log("gone", logging.DEBUG, "dashboard: client %s went away: %s",
                               peer, type(e).__name__)  # fmt: skip
        except Exception as e:  # a bug: said once per 10 s, in the log's own format
            self._throttle.log("bug", logging.ERROR, "dashboard: serving %s failed: %r",
                               peer, e, exc_info=e)  # fmt: skip
        finally:
            self.admission.release()
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # a client that does not read keeps nothing of ours
            else:
                writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests and answers on one connection until either side ends it."""
        while True:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    request = await _read(reader)
            except BadRequest as e:
                self._throttle.log("bad", logging.INFO, "dashboard: bad request (%d): %s",
                                   e.status, e)  # fmt: skip
                await self._send(writer, error_response(e.status, str(e), close=True))
                await _linger(reader, writer)
                return
            if request is None:
                return
            delay = self._requests.wait()
            if delay:
                await asyncio.sleep(delay)
            response = await self._handler(request)
            await self._send(writer, response, head_only=request.method == "HEAD")
            if response.close or not request.keep_alive:
                return

    async def _send(self, writer: asyncio.StreamWriter, response: Response,
                    head_only: bool = False) -> None:  # fmt: skip
        response = replace(response, headers={**self._headers, **response.headers})
        writer.write(render(response, head_only))
        async with asyncio.timeout(WRITE_TIMEOUT):
            await writer.drain()


async def _read(reader: asyncio.StreamReader) -> Request | None:
    """The next request, None when the client closed between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise
    except asyncio.LimitOverrunError:
        raise BadRequest(431, f"a request head is at most {MAX_HEAD} bytes") from None
    request = parse_head(head)
    length = request.content_length()
    return replace(request, body=await reader.readexactly(length)) if length else request


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Let the client read the answer to a request cut short: closing with its unread
    bytes still in our buffer would reset the connection, and the answer with it. So: say
    we are done writing, then drop what it still sends, ``LINGER_BYTES`` within
    ``LINGER_SECONDS`` at most."""
    writer.write_eof()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(LINGER_SECONDS):
            dropped = 0
            while dropped < LINGER_BYTES and (chunk := await reader.read(65536)):
                dropped += len(chunk)


def _peer(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
