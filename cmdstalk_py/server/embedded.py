"""Run the bundled server inside this process, on a background thread.

with EmbeddedServer() as srv:          # 127.0.0.1, a free port
    host, port = srv.address

with EmbeddedServer(binlog_dir="/var/lib/q", fsync_ms=0) as srv:   # durable, -b -f 0
    ...
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from cmdstalk_py.loop.core import Loop
from cmdstalk_py.server.assembly import Assembly
from cmdstalk_py.server.config import (
    DEFAULT_FSYNC_MS,
    DEFAULT_HOST,
    DEFAULT_SEGMENT_SIZE,
    ServerConfig,
)
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.journal import Journal
from cmdstalk_py.server.limits import DEFAULT_MAX_JOB_SIZE
from cmdstalk_py.server.net import Server

if TYPE_CHECKING:
    from cmdstalk_py.server.binlog.fsops import FileOps


class EmbeddedServer:
    """A beanstalkd-compatible server on its own event-loop thread.

    Options: ``max_job_size`` (``-z``), ``unix_path`` (also listen on a unix socket),
    ``journal`` (an in-memory hook, see :mod:`cmdstalk_py.server.journal`).

    Durability, as ``cmdstalk-server -b DIR -f MS -F -s BYTES``: ``binlog_dir`` (``-b``;
    locked and recovered by :meth:`start`, which raises
    :class:`~cmdstalk_py.server.binlog.BinlogError` when it cannot be used, e.g. another
    server holds it; the process's cyclic garbage collector is paused while it recovers,
    then given back as it was), ``fsync_ms`` (``-f``, default 50; 0 = fsync before every reply that
    changes state), ``fsync_never`` (``-F``), ``segment_size`` (``-s``; also shown by
    ``stats`` without a binlog). ``file_ops`` replaces the binlog's file operations (fault
    injection in tests).
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = 0,
        *,
        max_job_size: int = DEFAULT_MAX_JOB_SIZE,
        unix_path: str | None = None,
        journal: Journal | None = None,
        binlog_dir: str | None = None,
        fsync_ms: int = DEFAULT_FSYNC_MS,
        fsync_never: bool = False,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        file_ops: FileOps | None = None,
    ) -> None:
        if fsync_ms < 0:
            raise ValueError("fsync_ms must be >= 0")
        if journal is not None and binlog_dir is not None:
            raise ValueError("journal and binlog_dir exclude each other")
        self.host = host
        self.port = port
        self.max_job_size = max_job_size
        self.unix_path = unix_path
        self.journal = journal
        self.binlog_dir = binlog_dir
        self.fsync_ms: int | None = None if fsync_never else fsync_ms
        self.segment_size = segment_size
        self.file_ops = file_ops
        self._address: tuple[str, int] | None = None
        self._loop: Loop | None = None
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

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        config = ServerConfig(self.max_job_size, self.binlog_dir, self.fsync_ms, self.segment_size)
        asm: Assembly | None = None
        try:
            asm = Assembly.open(config, self.journal, self.file_ops)
            self._loop, self._server = asm.loop, asm.server
            self._address = asm.server.listen_tcp(self.host, self.port)
            if self.unix_path:
                asm.server.listen_unix(self.unix_path)
        except BaseException as exc:
            self._error = exc
            if asm is not None:
                self._close(asm)
            self._ready.set()
            return
        self._ready.set()
        try:
            asm.loop.run_forever()
        finally:
            self._close(asm)

    def _close(self, asm: Assembly) -> None:
        self._loop = None
        self._server = None
        if asm.binlog is None:
            asm.close()
            return
        from cmdstalk_py.server.binlog import BinlogError

        try:
            asm.close()
        except BinlogError as exc:
            # stop() runs in finally blocks and __exit__: report, do not raise.
            logging.getLogger("cmdstalk_py.server.binlog").error("closing the binlog: %s", exc)
