"""One beanstalkd connection that heals itself: reconnect with tenacity, restore use/watch.

Every worker and every discovery owns one, on the supervisor's event loop
(``cmdstalk_py.loop``). ``client()`` hands out a connected ``aio.AsyncClient``,
(re)connecting first when needed: exponential backoff with jitter, capped, until it works
or ``stop()`` is called (then ``Stopped``; ``stop()`` cuts a back-off or a connect attempt
short). Failures and recoveries are reported through an ``OutageReporter`` the owner may
share between all its connections to one server, so an outage is one warning, not one per
connection per attempt. Callers report a broken connection with ``drop()``; the next
``client()`` connects afresh.
Connection errors never escape ``client()`` as anything but ``Stopped``.

tenacity's ``AsyncRetrying`` drives the retries on our loop: given its ``sleep`` (ours),
it awaits nothing else and never imports asyncio. It is imported at the first failed
connect: a supervisor whose server is up never pays for its import.
"""

from __future__ import annotations

import contextlib
import socket
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cmdstalk_py.client.aio import AsyncClient
from cmdstalk_py.client.errors import CONNECTION_ERRORS
from cmdstalk_py.client.names import format_address
from cmdstalk_py.client.outage import OutageReporter
from cmdstalk_py.client.pipeline import DEFAULT_TUBE
from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.loop.futures import CancelledError, Future, current_task, ensure_future
from cmdstalk_py.loop.tools import Event, Semaphore, timeout
from cmdstalk_py.ops.observers import Observer

if TYPE_CHECKING:
    import tenacity

__all__ = ["CONNECTION_ERRORS", "HealingConnection", "OutageReporter", "Stopped"]

#: Connection attempts under way at once on one loop, at most. A thousand workers
#: connecting together overflow a server's listen backlog, and a dropped SYN waits a
#: second for its retry: taken in turns, they are all up sooner.
MAX_CONNECTING = 128
_CONNECTING: weakref.WeakKeyDictionary[Loop, Semaphore] = weakref.WeakKeyDictionary()


def _connecting() -> Semaphore:
    loop = get_running_loop()
    slots = _CONNECTING.get(loop)
    if slots is None:
        slots = _CONNECTING[loop] = Semaphore(MAX_CONNECTING)
    return slots


class Stopped(Exception):
    """``stop()`` was called while (re)connecting; the owner should wind down."""


class HealingConnection:
    """A lazily (re)connected ``AsyncClient`` for one owner (``where``, e.g. ``mail:0``).

    ``watch``: the tube, or tubes, to watch (``default`` is ignored unless it is one of
    them; ``set_watch`` changes them); ``use``: the tube to use. Both are restored after
    every reconnect. ``outage``: the reporter shared with the owner's other connections to
    this server (default: its own).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        where: str,
        watch: str | Sequence[str] | None = None,
        use: str | None = None,
        io_timeout: float = 30.0,
        max_wait: float = 5.0,
        observer: Observer | None = None,
        outage: OutageReporter | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.address = format_address(host, port)
        self.where = where
        self._watch: tuple[str, ...] | None = (
            None if watch is None else (watch,) if isinstance(watch, str) else tuple(watch)
        )
        self._use = use
        self._io_timeout = io_timeout
        self._max_wait = max_wait
        self._observer = observer or Observer()
        self._outage = outage or OutageReporter(self.address)
        self._client: AsyncClient | None = None
        self._ever_connected = False
        self._planned = False  # the last drop was ours (a new watch set), not a failure
        self._stopped = False
        self._attempt: Future[AsyncClient] | None = None
        self._wakeup: Event | None = None  # set by stop(): ends a back-off sleep

    @property
    def connected(self) -> bool:
        """A connection is up (``client()`` returns at once)."""
        return self._client is not None

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """No more (re)connecting: a back-off or a connect under way ends in ``Stopped``."""
        self._stopped = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._attempt is not None:
            self._attempt.cancel()

    @property
    def sock(self) -> socket.socket | None:
        """The connected socket (None while not connected)."""
        return None if self._client is None else self._client.sock

    async def client(self) -> AsyncClient:
        """The connected client, connecting (with retries) first if needed; or ``Stopped``."""
        current = self._client
        if current is not None:
            if current.loop is get_running_loop():
                return current
            self.drop(planned=True)  # made on another loop (a standalone broker run again)
        try:
            client: AsyncClient = await self._connect()  # the usual case: at once
        except CONNECTION_ERRORS as e:
            self._log_failure_of(e, 0.0)
            client = await self._retry()
        self._outage.connected(self.where)
        if self._ever_connected and not self._planned:
            self._observer.reconnected(self.where, self.address)
        self._planned = False
        self._ever_connected = True
        self._client = client
        return client

    async def _retry(self) -> AsyncClient:
        """Connect with backoff (tenacity) until it works or ``stop()``."""
        import tenacity  # here: start-up time (module docstring)

        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(CONNECTION_ERRORS),
            wait=tenacity.wait_exponential_jitter(multiplier=0.1, max=self._max_wait, jitter=0.2),
            stop=lambda _state: self._stopped,
            sleep=self._sleep,
            before_sleep=self._log_failure,
            reraise=True,
        )
        try:
            client: AsyncClient = await retrying(self._connect)
        except CONNECTION_ERRORS as e:  # only when stop() ended the retries
            raise Stopped(str(e)) from e
        return client

    async def _sleep(self, seconds: float) -> None:
        self._wakeup = wakeup = Event()
        try:
            with contextlib.suppress(TimeoutError):
                async with timeout(seconds):
                    await wakeup.wait()  # stop() cuts the back-off short
        finally:
            self._wakeup = None

    async def _connect(self) -> AsyncClient:
        if self._stopped:
            raise Stopped("stopping")
        self._attempt = ensure_future(self._open())
        try:
            return await self._attempt
        except CancelledError:
            task = current_task()
            if self._stopped and (task is None or not task.cancelling()):
                raise Stopped("stopping") from None
            raise
        finally:
            self._attempt = None

    async def _open(self) -> AsyncClient:
        async with _connecting():
            return await self._open_now()

    async def _open_now(self) -> AsyncClient:
        client = await AsyncClient.open(self.host, self.port, self._io_timeout)
        try:
            watch = self._watch if self._watch else (DEFAULT_TUBE,)
            use = self._use if self._use is not None else DEFAULT_TUBE
            replies = []
            if use != DEFAULT_TUBE:
                replies.append(client.use(use))
            # Nothing asked yet: a watch of default anyway, so "connected" (and READY=1)
            # means the server answers.
            replies.extend(client.watch(tube) for tube in watch)
            if DEFAULT_TUBE not in watch:
                replies.append(client.ignore(DEFAULT_TUBE))
            for reply in replies:  # sent together; each reply checked in order
                await reply
        except BaseException:
            client.close()
            raise
        return client

    @property
    def watching(self) -> tuple[str, ...]:
        """The tubes this connection watches (or will, once connected)."""
        return self._watch or (DEFAULT_TUBE,)

    async def set_watch(self, tubes: Sequence[str]) -> None:
        """Watch exactly ``tubes`` (not empty) from now on, and after every reconnect.

        On a live connection the difference is sent as watch / ignore commands (new tubes
        first: a connection must always watch one), together. Connection errors
        propagate: the caller drops the connection; the next ``client()`` watches anew.
        """
        new = tuple(tubes)
        if not new:
            raise ValueError("a connection watches at least one tube")
        old = self.watching
        self._watch = new
        client = self._client
        if client is None or set(old) == set(new):
            return
        replies = [client.watch(t) for t in new if t not in old]
        replies.extend(client.ignore(t) for t in old if t not in new)
        for reply in replies:
            await reply

    def _log_failure(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        self._log_failure_of(exc, delay)

    def _log_failure_of(self, error: BaseException | None, delay: float) -> None:
        self._outage.failed(self.where, error or "unknown error", delay)

    def drop(self, reason: object = None, *, planned: bool = False) -> None:
        """Forget the current connection (it failed); the next ``client()`` reconnects.

        ``planned``: the owner cut it on purpose (a worker claiming a new watch set): the
        next connection is not reported as a reconnection."""
        self._planned = planned
        client, self._client = self._client, None
        if client is None:
            return
        if reason is not None:
            self._outage.lost(self.where, reason)
        client.close()

    def close(self) -> None:
        """Close the connection (its owner is done with it; ``client()`` would connect
        again, unless ``stop()`` was called)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()
