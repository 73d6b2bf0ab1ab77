"""One beanstalkd connection that heals itself: reconnect with tenacity, restore use/watch.

Every broker and the dispatcher own one. ``client()`` hands out a connected
``pipeline.Client``, (re)connecting first when needed: exponential backoff with jitter,
capped, until it works or the stop event is set (then ``Stopped``). Failures and
recoveries are reported through an ``OutageReporter`` the owner may share between all its
connections to one server, so an outage is one warning, not one per connection per
attempt. Callers report a broken connection with ``drop()``; the next ``client()`` connects
afresh. Connection errors never escape as anything but ``Stopped``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Sequence

import tenacity

from cmdstalk_py.client.errors import CONNECTION_ERRORS
from cmdstalk_py.client.names import format_address
from cmdstalk_py.client.outage import OutageReporter
from cmdstalk_py.client.pipeline import DEFAULT_TUBE, Client
from cmdstalk_py.client.reader import set_io_timeout
from cmdstalk_py.ops.observers import Observer

__all__ = ["CONNECTION_ERRORS", "HealingConnection", "OutageReporter", "Stopped"]


class Stopped(Exception):
    """The stop event was set while (re)connecting; the owner should wind down."""


class HealingConnection:
    """A lazily (re)connected ``Client`` for one owner (``where``, e.g. ``mail:0``).

    ``watch``: the tube, or tubes, to watch (``default`` is ignored unless it is one of
    them; ``set_watch`` changes them); ``use``: the tube to use. Both are restored after
    every reconnect. ``outage``: the
    reporter shared with the owner's other connections to this server (default: its own).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        where: str,
        stop: threading.Event,
        watch: str | Sequence[str] | None = None,
        use: str | None = None,
        io_timeout: float = 30.0,
        max_wait: float = 5.0,
        observer: Observer | None = None,
        outage: OutageReporter | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._address: str | None = None
        self.where = where
        self.stop = stop
        self._watch: tuple[str, ...] | None = (
            None if watch is None else (watch,) if isinstance(watch, str) else tuple(watch)
        )
        self._use = use
        self._io_timeout = io_timeout
        self._max_wait = max_wait
        self._observer = observer or Observer()
        self._outage = outage or OutageReporter(format_address(host, port))
        self._client: Client | None = None
        self._sock: socket.socket | None = None
        self._ever_connected = False
        self._planned = False  # the last drop was ours (a new watch set), not a failure
        self.connected = threading.Event()  # set while a connection is up

    @property
    def address(self) -> str:
        """``host:port`` (named in every job's result: formatted once)."""
        if self._address is None:
            self._address = format_address(self.host, self.port)
        return self._address

    def client(self) -> Client:
        """The connected client, connecting (with retries) first if needed; or ``Stopped``."""
        if self._client is not None:
            return self._client
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(CONNECTION_ERRORS),
            wait=tenacity.wait_exponential_jitter(multiplier=0.1, max=self._max_wait, jitter=0.2),
            stop=lambda _state: self.stop.is_set(),
            sleep=self._sleep,
            before_sleep=self._log_failure,
            reraise=True,
        )
        try:
            client = retrying(self._connect)
        except CONNECTION_ERRORS as e:  # only when the stop event ended the retries
            raise Stopped(str(e)) from e
        self._outage.connected(self.where)
        if self._ever_connected and not self._planned:
            self._observer.reconnected(self.where, self.address)
        self._planned = False
        self._ever_connected = True
        self._client = client
        self.connected.set()
        return client

    def _sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)  # a stop request cuts the back-off short

    def _connect(self) -> Client:
        if self.stop.is_set():
            raise Stopped("stopping")
        sock = self._open_socket()
        try:
            # Requests are small and answered one at a time: never let Nagle hold them.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # The kernel enforces the I/O timeout (a silent server fails a read with
            # EAGAIN, an OSError): with a Python-level timeout every send and recv would
            # first cost a poll().
            set_io_timeout(sock, self._io_timeout)
            _keepalive(sock, self._io_timeout)
            sock.settimeout(None)
            watch = self._watch if self._watch else (DEFAULT_TUBE,)
            use = self._use if self._use is not None else DEFAULT_TUBE
            client = Client(sock, use=use, watch=watch, io_timeout=self._io_timeout)
            if use == DEFAULT_TUBE and watch == (DEFAULT_TUBE,):
                # Nothing was asked yet: "connected" (and READY=1) means the server answers.
                client.watch(DEFAULT_TUBE)
        except BaseException:
            self._sock = None
            sock.close()
            raise
        return client

    def _open_socket(self) -> socket.socket:
        """``socket.create_connection``, except that ``abort()`` can cut it short.

        The socket is published before ``connect``: shutting it down from another thread
        ends a connect that waits on a host that drops our SYNs, and the wait for the
        first replies, which a server that accepts but never answers makes as long as the
        I/O timeout. Either would hold a stopping supervisor that long.
        """
        error: OSError = OSError(f"no address for {self.address}")
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        for family, kind, proto, _, sockaddr in infos:
            sock = socket.socket(family, kind, proto)
            self._sock = sock
            try:
                if self.stop.is_set():  # stopped, maybe aborted, before the line above
                    raise Stopped("stopping")
                sock.settimeout(self._io_timeout)
                sock.connect(sockaddr)
                return sock
            except BaseException as e:
                self._sock = None
                sock.close()
                if not isinstance(e, OSError):
                    raise
                error = e
        raise error

    @property
    def watching(self) -> tuple[str, ...]:
        """The tubes this connection watches (or will, once connected)."""
        return self._watch or (DEFAULT_TUBE,)

    def set_watch(self, tubes: Sequence[str]) -> None:
        """Watch exactly ``tubes`` (not empty) from now on, and after every reconnect.

        On a live connection the difference is sent as watch / ignore commands (new tubes
        first: a connection must always watch one). Connection errors propagate: the
        caller drops the connection, and the next ``client()`` watches the new set.
        """
        new = tuple(tubes)
        if not new:
            raise ValueError("a connection watches at least one tube")
        old = self.watching
        self._watch = new
        client = self._client
        if client is None or set(old) == set(new):
            return
        for tube in new:
            if tube not in old:
                client.watch(tube)
        for tube in old:
            if tube not in new:
                client.ignore(tube)

    def abort(self) -> None:
        """Cut the connection under a blocked call (from another thread): it fails at once.

        Also while (re)connecting, waiting for the replies to use and watch. The server sees
        the connection close and takes back any job reserved on it.
        """
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _log_failure(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        self._outage.failed(self.where, exc or "unknown error", delay)

    def drop(self, reason: object = None, *, planned: bool = False) -> None:
        """Forget the current connection (it failed); the next ``client()`` reconnects.

        ``planned``: the owner cut it on purpose (a worker claiming a new watch set): the
        next connection is not reported as a reconnection."""
        self._planned = planned
        client, self._client = self._client, None
        self._sock = None
        self.connected.clear()
        if client is None:
            return
        if reason is not None:
            self._outage.lost(self.where, reason)
        with contextlib.suppress(OSError):
            client.close()

    def close(self) -> None:
        """Close the connection for good (on shutdown)."""
        client, self._client = self._client, None
        self._sock = None
        self.connected.clear()
        if client is not None:
            with contextlib.suppress(OSError):
                client.close()


def _keepalive(sock: socket.socket, idle: float) -> None:
    """TCP keepalive after ``idle`` seconds of silence: a worker blocked in a plain
    ``reserve`` learns of a peer that vanished (no FIN, no RST) without sending a request."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; elsewhere the system's defaults apply
        after = max(1, int(idle))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, after)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, after // 3))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
