"""Run the bundled server inside this process, on a background thread.

    with EmbeddedServer() as srv:          # 127.0.0.1, a free port
        host, port = srv.address
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any

from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.journal import Journal
from cmdstalk_py.server.net import Server


class EmbeddedServer:
    """A beanstalkd-compatible server on its own event-loop thread.

    Options: ``max_job_size`` (``-z``), ``unix_path`` (also listen on a unix socket),
    ``journal`` (a durability hook, see :mod:`cmdstalk_py.server.journal`).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_job_size: int = p.DEFAULT_MAX_JOB_SIZE,
        unix_path: str | None = None,
        journal: Journal | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.max_job_size = max_job_size
        self.unix_path = unix_path
        self.journal = journal
        self._address: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the server listens on."""
        if self._address is None:
            raise RuntimeError("EmbeddedServer is not running")
        return self._address

    @property
    def engine(self) -> Engine:
        """The queue engine (touch it only from the server thread, e.g. via ``call``)."""
        if self._server is None:
            raise RuntimeError("EmbeddedServer is not running")
        return self._server.engine

    def start(self) -> EmbeddedServer:
        """Start listening; returns once connections are accepted."""
        if self._thread is not None:
            raise RuntimeError("EmbeddedServer already started")
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="cmdstalk-server", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def stop(self) -> None:
        """Close every connection and listener, end the thread. Idempotent."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._thread = None
        self._address = None

    def drain(self) -> None:
        """Enter drain mode (like SIGUSR1): later puts are answered DRAINING."""
        self.call(lambda server: server.drain())

    def call(self, fn: Any) -> Any:
        """Run ``fn(server)`` on the server thread and return its result."""
        loop, server = self._loop, self._server
        if loop is None or server is None:
            raise RuntimeError("EmbeddedServer is not running")
        done = threading.Event()
        result: list[Any] = []

        def run() -> None:
            try:
                result.append(fn(server))
            finally:
                done.set()

        loop.call_soon_threadsafe(run)
        done.wait()
        return result[0] if result else None

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            engine = Engine(loop.time(), self.max_job_size, self.journal)
            server = Server(engine, loop)
            self._server = server
            self._address = loop.run_until_complete(server.listen_tcp(self.host, self.port))
            if self.unix_path:
                loop.run_until_complete(server.listen_unix(self.unix_path))
        except BaseException as exc:
            self._error = exc
            self._close_loop(loop, None)
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._close_loop(loop, server)

    def _close_loop(self, loop: asyncio.AbstractEventLoop, server: Server | None) -> None:
        try:
            if server is not None:
                server.close()
                server.remove_unix_sockets()
                for srv in server.listeners:
                    loop.run_until_complete(srv.wait_closed())
                # Let the aborted transports run their connection_lost callbacks; abort any
                # connection accepted meanwhile (connection_made was still pending).
                for _ in range(5):
                    loop.run_until_complete(asyncio.sleep(0))
                    server.close()
        finally:
            loop.close()
            self._loop = None
            self._server = None
