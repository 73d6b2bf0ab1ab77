"""``framing``, ``aio.AsyncClient`` and the async ``HealingConnection``, on real sockets.

The framer is fed bytes alone (every way a reply can be split, and every way it can be
wrong); the client talks to both real servers, to a server that never answers, and to one
that is restarted under it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import greenstalk
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.client.aio import AsyncClient
from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import ConnectionLost, NotFound, TimedOut, UnexpectedReply
from cmdstalk_py.client.framing import MAX_LINE, Reply, ReplyFramer
from cmdstalk_py.ops.observers import Observer
from tests.client.test_connection import silent_server
from tests.helpers import BeanstalkServer, running_beanstalkd

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]], limit: float = 30.0) -> T:
    """Run a coroutine on a new loop, bounded (a hang fails the test, not the suite)."""

    async def bounded() -> T:
        async with asyncio.timeout(limit):
            return await make()

    return asyncio.run(bounded())


# -- framing ------------------------------------------------------------------------------

STREAM = b"RESERVED 7 5\r\nhello\r\nDELETED\r\nOK 3\r\nabc\r\nNOT_FOUND\r\nFOUND 9 0\r\n\r\n"
REPLIES = [
    Reply(b"RESERVED 7 5", b"hello"),
    Reply(b"DELETED"),
    Reply(b"OK 3", b"abc"),
    Reply(b"NOT_FOUND"),
    Reply(b"FOUND 9 0", b""),
]


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM)), max_size=12))
def test_the_framer_gives_the_same_replies_however_the_bytes_are_split(cuts: list[int]) -> None:
    framer = ReplyFramer()
    got: list[Reply] = []
    start = 0
    for cut in sorted(set(cuts)):
        got += framer.feed(STREAM[start:cut])
        start = cut
    got += framer.feed(STREAM[start:])
    assert got == REPLIES


@pytest.mark.parametrize(
    "data",
    [
        b"DELETED\n",  # LF alone
        b"OK 3\r\nabcXY",  # a block without its CRLF
        b"RESERVED 1\r\n",  # a block reply without its size
        b"OK x\r\n",  # a size that is no number
        b"A" * (MAX_LINE + 1),  # a line that never ends
    ],
)
def test_the_framer_refuses_a_reply_out_of_step(data: bytes) -> None:
    with pytest.raises(UnexpectedReply):
        ReplyFramer().feed(data)


def test_the_framer_refuses_a_block_over_its_bound_before_reading_it() -> None:
    with pytest.raises(UnexpectedReply, match="over 100"):
        ReplyFramer(max_body=100).feed(b"RESERVED 1 101\r\n")


# -- AsyncClient against both servers -----------------------------------------------------


def test_pipelined_commands_are_answered_in_order(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="aio")
    first = producer.put(b"one", priority=1, ttr=30)
    producer.put(b"two", priority=2, ttr=30)

    async def session() -> list[Any]:
        client = await AsyncClient.open(beanstalk.host, beanstalk.port)
        try:
            watched = client.watch("aio")
            job = client.reserve(0)
            # Sent before any reply is read: beanstalkd answers each in turn.
            missing = client.delete(10**9)
            stats = client.stats_job(first)
            taken = await job
            deleted = client.delete(taken.id)
            nxt = client.reserve(0)
            results: list[Any] = [await watched, taken.body]
            with pytest.raises(NotFound):
                await missing
            results += [(await stats)["state"], await deleted, (await nxt).body]
            with pytest.raises(TimedOut):
                await client.reserve(0)
            return results
        finally:
            client.close()

    assert run(session) == [2, b"one", "reserved", [], b"two"]
    with pytest.raises(greenstalk.NotFoundError):
        producer.stats_job(first)


def test_closing_the_client_fails_a_reserve_and_the_server_takes_the_job_back(
    beanstalk: BeanstalkServer,
) -> None:
    producer = beanstalk.client(use="aio-close")

    async def session() -> None:
        client = await AsyncClient.open(beanstalk.host, beanstalk.port)
        await client.watch("aio-close")
        reply = client.reserve(None)  # waits: no job yet
        await asyncio.sleep(0)
        client.close()
        with pytest.raises(ConnectionLost):
            await reply
        assert client.closed.is_set()
        # Nothing can be sent on a closed client: it fails at once.
        with pytest.raises(ConnectionLost):
            await client.tubes()

    run(session)
    job_id = producer.put(b"x")
    assert producer.stats_job(job_id)["state"] == "ready"


def test_a_silent_server_fails_every_request_in_flight_after_the_io_timeout() -> None:
    with silent_server() as (host, port):

        async def session() -> tuple[BaseException, BaseException]:
            client = await AsyncClient.open(host, port, io_timeout=0.3)
            first, second = client.tubes(), client.stats_tube("x")
            errors = []
            for reply in (first, second):
                try:
                    await reply
                except BaseException as e:
                    errors.append(e)
            return errors[0], errors[1]

        first, second = run(session)
    assert isinstance(first, TimeoutError)
    assert str(first) == "no reply from the server in 0.3s"
    assert isinstance(second, TimeoutError)


def test_a_plain_reserve_outlasts_the_io_timeout(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="aio-long")

    async def session() -> bytes:
        client = await AsyncClient.open(beanstalk.host, beanstalk.port, io_timeout=0.2)
        try:
            await client.watch("aio-long")
            reply = client.reserve(None)
            # Three I/O timeouts later the reserve still waits, and the connection is up
            # (an absence cannot be polled for: the time passing is what is tested).
            await asyncio.sleep(0.6)
            assert not reply.done()
            await asyncio.to_thread(producer.put, b"late")
            return (await reply).body
        finally:
            client.close()

    assert run(session) == b"late"


def test_no_timer_is_left_armed_while_only_a_plain_reserve_waits(
    beanstalk: BeanstalkServer,
) -> None:
    """Thousands of idle workers: a timer each, armed by their first (bounded) requests,
    would fire together an io_timeout later for nothing; it is cancelled once the bounded
    replies are in, and armed again by the next bounded request."""

    async def session() -> list[bool]:
        client = await AsyncClient.open(beanstalk.host, beanstalk.port, io_timeout=30)
        try:
            armed = []
            watched = client.watch("aio-idle")
            armed.append(client._watchdog is not None)  # a bounded request in flight
            await watched
            armed.append(client._watchdog is not None)  # answered: nothing to watch
            listed = client.tubes()
            armed.append(client._watchdog is not None)  # armed again
            await listed
            reply = client.reserve(None)
            armed.append(client._watchdog is not None)  # a plain reserve: no bound
            reply.cancel()
            return armed
        finally:
            client.close()

    assert run(session) == [True, False, True, False]


# -- HealingConnection --------------------------------------------------------------------


class Recorder(OutageReporter):
    """The real reporter, also keeping what each failed attempt raised."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.errors: list[object] = []

    def failed(self, where: str, error: object, retry_in: float) -> None:
        self.errors.append(error)
        super().failed(where, error, retry_in)


def test_a_silent_server_fails_each_attempt_and_stop_ends_the_retries() -> None:
    with silent_server() as (host, port):
        outage = Recorder(f"{host}:{port}")
        connection = HealingConnection(host, port, where="t:0", io_timeout=0.3, outage=outage)

        async def session() -> BaseException | None:
            attempt = asyncio.ensure_future(connection.client())
            # Even on the default tubes connecting asks the server something (READY=1
            # means it answers): a silent server fails each attempt after the I/O timeout.
            while not outage.errors:
                await asyncio.sleep(0.01)
            connection.stop()
            try:
                await attempt
            except BaseException as e:
                return e
            return None

        error = run(session)
    assert isinstance(error, Stopped)
    assert isinstance(outage.errors[0], TimeoutError)
    assert str(outage.errors[0]) == "no reply from the server in 0.3s"


def test_stop_cuts_a_connection_waiting_for_its_first_replies() -> None:
    with silent_server() as (host, port):
        # The I/O timeout is 30 s: only stop() ends the wait for "watch"'s reply.
        connection = HealingConnection(host, port, where="t:0", watch="t")

        async def session() -> BaseException | None:
            attempt = asyncio.ensure_future(connection.client())
            await asyncio.sleep(0.2)  # it waits (for ever, but for stop()): nothing to poll
            assert not attempt.done()
            connection.stop()
            try:
                await attempt
            except BaseException as e:
                return e
            return None

        assert isinstance(run(session, limit=10), Stopped)


class _Reconnects(Observer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def reconnected(self, where: str, address: str) -> None:
        self.seen.append((where, address))


def _held_by_one(server: BeanstalkServer, tube: str) -> tuple[int, int]:
    stats = server.client().stats_tube(tube)
    return stats["current-using"], stats["current-watching"]


def test_a_reconnect_restores_use_and_watch() -> None:
    observer = _Reconnects()
    loop = asyncio.new_event_loop()
    try:
        with running_beanstalkd() as first:
            port = first.port
            connection = HealingConnection(
                first.host, port, where="heal:0", watch="heal-watch", use="heal-use",
                max_wait=0.2, observer=observer,
            )  # fmt: skip
            loop.run_until_complete(connection.client())
            assert _held_by_one(first, "heal-use")[0] == 1
            assert _held_by_one(first, "heal-watch")[1] == 1
            assert connection.connected
        connection.drop("server restarted")
        assert not connection.connected
        with running_beanstalkd(port=port) as second:

            async def again() -> list[str]:
                client = await connection.client()  # a new connection: use, watch again
                return await client.tubes()

            assert sorted(loop.run_until_complete(again())) == [
                "default", "heal-use", "heal-watch"
            ]  # fmt: skip
            assert _held_by_one(second, "heal-use")[0] == 1
            assert _held_by_one(second, "heal-watch")[1] == 1
            assert observer.seen == [("heal:0", f"127.0.0.1:{port}")]
            connection.close()
            loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
