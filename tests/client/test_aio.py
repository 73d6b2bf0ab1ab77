"""``framing``, ``aio.AsyncClient`` and the async ``HealingConnection``, on real sockets.

The framer is fed bytes alone (every way a reply can be split, and every way it can be
wrong); the client talks, on the project's loop, to both real servers, to a server that
never answers, to one that is restarted under it, and to a scripted peer (a plain socket
the test writes to) for each way a connection breaks.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import greenstalk
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.client.aio import MAX_UNSENT, AsyncClient
from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import ConnectionLost, NotFound, TimedOut, UnexpectedReply
from cmdstalk_py.client.framing import MAX_LINE, Reply, ReplyFramer
from cmdstalk_py.client.replies import parse_int, parse_reply
from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop
from cmdstalk_py.loop.futures import Future, ensure_future
from cmdstalk_py.ops.observers import Observer
from tests.client.test_connection import silent_server
from tests.helpers import BeanstalkServer, running_beanstalkd

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]], limit: float = 30.0) -> T:
    """Run a coroutine on a new loop, bounded (a hang fails the test, not the suite)."""

    async def bounded() -> T:
        async with tools.timeout(limit):
            return await make()

    return tools.run(bounded())


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
        await tools.sleep(0)
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
            await tools.sleep(0.6)
            assert not reply.done()
            await tools.to_thread(producer.put, b"late")
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


# -- AsyncClient's socket: each way a connection breaks, against a scripted peer ----------


@contextmanager
def listening(host: str = "127.0.0.1", rcvbuf: int | None = None) -> Iterator[socket.socket]:
    """A listening socket on a free port: the test plays the server on what it accepts."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        if rcvbuf is not None:  # inherited by the accepted socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.bind((host, 0))
        sock.listen(8)
        yield sock
    finally:
        sock.close()


async def connect_to(
    listener: socket.socket, io_timeout: float = 30.0
) -> tuple[AsyncClient, socket.socket]:
    """An ``AsyncClient`` connected to ``listener``, and the peer's end of it."""
    host, port = listener.getsockname()[:2]
    client = await AsyncClient.open(host, port, io_timeout)
    # The handshake is done once open returns: accept does not block.
    peer, _ = listener.accept()
    peer.settimeout(10)
    return client, peer


def recv_exactly(peer: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = peer.recv(size - len(data))
        assert chunk, f"end of stream after {data!r}"
        data += chunk
    return data


def test_a_server_closing_mid_reply_fails_every_request_in_flight() -> None:
    with listening() as listener:

        async def session() -> tuple[BaseException, BaseException, bool]:
            client, peer = await connect_to(listener)
            with peer:
                stats, listed = client.stats_tube("x"), client.tubes()
                recv_exactly(peer, len(b"stats-tube x\r\nlist-tubes\r\n"))
                peer.sendall(b"OK 100\r\nname: x\n")  # 100 bytes announced, 8 sent
            errors = []
            for reply in (stats, listed):
                with pytest.raises(ConnectionLost) as raised:
                    await reply
                errors.append(raised.value)
            return errors[0], errors[1], client.closed.is_set()

        first, second, closed = run(session)
    assert str(first) == str(second) == "Unexpected EOF"
    assert closed


def test_a_reset_connection_fails_the_request_with_its_os_error() -> None:
    with listening() as listener:

        async def session() -> None:
            client, peer = await connect_to(listener)
            listed = client.tubes()
            recv_exactly(peer, len(b"list-tubes\r\n"))
            # Linger 0: the close is a RST, not a FIN.
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            peer.close()
            with pytest.raises(ConnectionResetError):
                await listed
            assert client.closed.is_set()
            with pytest.raises(ConnectionResetError):  # the cause, for whoever asks next
                await client.tubes()

        run(session)


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def test_replies_split_over_many_reads_are_put_together_in_order() -> None:
    body = b"---\nname: split\ncurrent-jobs-ready: 3\n"
    stream = b"OK %d\r\n%s\r\nWATCHING 2\r\nUSING split\r\n" % (len(body), body)
    with listening() as listener:

        async def session() -> list[object]:
            client, peer = await connect_to(listener)
            with peer:
                stats, watched = client.stats_tube("split"), client.watch("s")
                used = client.use("split")
                recv_exactly(peer, len(b"stats-tube split\r\nwatch s\r\nuse split\r\n"))
                for i in range(len(stream)):
                    assert not used.done()
                    peer.sendall(stream[i : i + 1])
                    # One byte, one read: the loop takes it before the next is sent.
                    while _readable(client.sock):
                        await tools.sleep(0)
                return [(await stats)["name"], await watched, await used, client.in_flight]

        assert run(session) == ["split", 2, [b"split"], 0]


def test_held_requests_wait_for_send_held_and_go_out_in_order() -> None:
    """A job's final command and the next reserve: held, nothing is sent; then both at once,
    in order, and each still gets its own reply."""
    with listening() as listener:

        async def session() -> list[object]:
            client, peer = await connect_to(listener)
            with peer:
                client.hold()
                deleted, reserved = client.delete(7), client.reserve()
                # A send on loopback is in the peer's queue once it returns: none was made.
                peer.setblocking(False)
                with pytest.raises(BlockingIOError):
                    peer.recv(64)
                peer.settimeout(10)
                client.send_held()
                sent = b"delete 7\r\nreserve\r\n"
                assert recv_exactly(peer, len(sent)) == sent
                peer.sendall(b"DELETED\r\nRESERVED 8 2\r\nhi\r\n")
                job = await reserved
                return [await deleted, job.id, job.body, client.in_flight]

        assert run(session) == [[], 8, b"hi", 0]


def test_a_server_that_never_answers_is_cut_off_after_the_io_timeout() -> None:
    with listening() as listener:

        async def session() -> None:
            client, peer = await connect_to(listener, io_timeout=0.3)
            with peer:
                listed = client.tubes()
                with pytest.raises(TimeoutError, match=r"no reply from the server in 0.3s"):
                    await listed
                assert client.closed.is_set()
                # Closed at once: the peer reads the request, then the end of the stream.
                assert recv_exactly(peer, 12) == b"list-tubes\r\n"
                assert peer.recv(10) == b""

        run(session)


def test_close_fails_every_request_in_flight_and_ends_the_stream() -> None:
    with listening() as listener:

        async def session() -> list[str]:
            client, peer = await connect_to(listener)
            with peer:
                replies: list[Future[Any]] = [
                    client.watch("a"), client.tubes(), client.reserve(None)
                ]  # fmt: skip
                assert client.in_flight == 3
                client.close()
                assert client.in_flight == 0 and client.closed.is_set()
                errors = []
                for reply in replies:
                    with pytest.raises(ConnectionLost) as raised:
                        await reply
                    errors.append(str(raised.value))
                sent = b"watch a\r\nlist-tubes\r\nreserve\r\n"
                assert recv_exactly(peer, len(sent)) == sent
                assert peer.recv(10) == b""
                return errors

        assert run(session) == ["connection closed"] * 3


def test_a_refused_connection_raises_connection_refused() -> None:
    with socket.socket() as unused:  # bound, not listening: a connect is refused
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]

        async def session() -> None:
            with pytest.raises(ConnectionRefusedError):
                await AsyncClient.open("127.0.0.1", port, io_timeout=10)

        run(session)


def test_an_unresolvable_name_raises_an_os_error_that_names_it() -> None:
    async def session() -> None:
        with pytest.raises(OSError, match=r"no-such-host\.invalid"):
            await AsyncClient.open("no-such-host.invalid", 11300, io_timeout=10)

    run(session)


def test_a_name_is_resolved_and_connects(beanstalk: BeanstalkServer) -> None:
    async def by_name() -> list[str]:
        client = await AsyncClient.open("localhost", beanstalk.port)  # resolved off the loop
        try:
            return await client.tubes()
        finally:
            client.close()

    assert run(by_name) == ["default"]


def test_the_socket_sends_small_requests_at_once_and_probes_a_silent_peer(
    beanstalk: BeanstalkServer,
) -> None:
    async def options() -> list[int]:
        client = await AsyncClient.open(beanstalk.host, beanstalk.port, io_timeout=9)
        try:
            sock = client.sock
            return [
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),  # no Nagle wait
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            ]
        finally:
            client.close()

    assert run(options) == [1, 1, 9]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_literal_connects() -> None:
    with listening("::1") as listener:

        async def by_v6() -> int:
            client, peer = await connect_to(listener)
            with peer:
                watched = client.watch("six")
                recv_exactly(peer, len(b"watch six\r\n"))
                peer.sendall(b"WATCHING 2\r\n")
                return await watched

        assert run(by_v6) == 2


def _put(client: AsyncClient, body: bytes) -> Any:
    data = b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)
    return client.request(data, lambda r: parse_int(parse_reply(r.line, b"INSERTED", 1)[0]), 30)


BIG = 8 << 20


@pytest.fixture(params=["beanstalkd", "bundled"])
def big_jobs(request: pytest.FixtureRequest) -> Iterator[BeanstalkServer]:
    """Each server, taking jobs of up to 8 MiB."""
    if request.param == "beanstalkd":
        with running_beanstalkd("-z", str(BIG)) as server:
            yield server
        return
    from cmdstalk_py.server.embedded import EmbeddedServer

    with EmbeddedServer(host="127.0.0.1", port=0, max_job_size=BIG) as srv:
        host, port = srv.address
        yield BeanstalkServer("bundled", host, port)


def test_large_puts_go_out_in_many_writes_whole_and_in_order(big_jobs: BeanstalkServer) -> None:
    pattern = bytes(range(251))  # a prime period: a lost or moved chunk shows
    big = pattern * ((4 << 20) // 251)
    medium = pattern[::-1] * ((512 << 10) // 251)

    async def session() -> tuple[list[int], list[bool]]:
        client = await AsyncClient.open(big_jobs.host, big_jobs.port)
        try:
            # A small send buffer: the kernel takes a few KiB per write.
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            queued = []
            first, second = _put(client, b"small"), _put(client, big)
            queued.append(bool(client._unsent))
            ids = [await first, await second]
            third = _put(client, medium)
            queued.append(bool(client._unsent))
            # The server drains some (the loop is held here): the kernel has room again,
            # yet the next request must wait behind the rest of the medium one.
            select.select([], [client.sock], [], 10)
            fourth = _put(client, b"behind")
            ids += [await third, await fourth]
            queued.append(bool(client._unsent))
            return ids, queued
        finally:
            client.close()

    ids, queued = run(session)
    assert queued == [True, True, False]
    assert ids == sorted(ids) and len(set(ids)) == 4
    plain: greenstalk.Client[bytes] = greenstalk.Client(
        (big_jobs.host, big_jobs.port), encoding=None
    )
    try:
        bodies = [plain.peek(job_id).body for job_id in ids]
    finally:
        plain.close()
    assert bodies == [b"small", big, medium, b"behind"]


def test_a_server_that_stops_reading_fails_the_connection_past_the_unsent_bound() -> None:
    with listening(rcvbuf=4096) as listener:

        async def session() -> tuple[BaseException, BaseException]:
            client, peer = await connect_to(listener)
            with peer:
                client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                stuck = _put(client, b"x" * (2 * MAX_UNSENT))  # the peer reads nothing
                assert len(client._unsent) > MAX_UNSENT
                refused = client.tubes()
                errors = []
                for reply in (stuck, refused):
                    with pytest.raises(ConnectionLost) as raised:
                        await reply
                    errors.append(raised.value)
                assert client.closed.is_set() and not client._unsent
                return errors[0], errors[1]

        stuck, refused = run(session)
    assert "the server reads no requests" in str(stuck)
    assert stuck is refused


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
            attempt = ensure_future(connection.client())
            # Even on the default tubes connecting asks the server something (READY=1
            # means it answers): a silent server fails each attempt after the I/O timeout.
            while not outage.errors:
                await tools.sleep(0.01)
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
            attempt = ensure_future(connection.client())
            await tools.sleep(0.2)  # it waits (for ever, but for stop()): nothing to poll
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
    loop = Loop()
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
            loop.run_until_complete(tools.sleep(0))
    finally:
        loop.close()


HEAL_ON_OUR_LOOP = """
import json, socket, sys
from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.loop import tools

class Stop(OutageReporter):
    errors = []
    def failed(self, where, error, retry_in):
        self.errors.append((type(error).__name__, retry_in))
        if len(self.errors) == 3:
            connection.stop()

with socket.socket() as unused:  # bound, not listening: every attempt is refused
    unused.bind(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    connection = HealingConnection(
        "127.0.0.1", port, where="t:0", max_wait=0.2, outage=Stop("127.0.0.1:%d" % port)
    )
    try:
        tools.run(connection.client())
    except Stopped:
        print("stopped")
print(json.dumps(Stop.errors))
print("asyncio" in sys.modules)
"""


def test_reconnecting_backs_off_on_our_loop_without_importing_asyncio() -> None:
    """tenacity's AsyncRetrying, given our sleep, retries on our loop; asyncio is never
    imported (its import alone is a noticeable part of the supervisor's start-up)."""
    done = subprocess.run(
        [sys.executable, "-c", HEAL_ON_OUR_LOOP], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    stopped, errors, imported = done.stdout.splitlines()
    assert stopped == "stopped"
    seen = json.loads(errors)  # (the error's class, the delay before the next attempt)
    assert [name for name, _ in seen] == ["ConnectionRefusedError"] * 3
    assert seen[0][1] == 0.0 and all(0 < delay <= 0.2 for _, delay in seen[1:])
    assert imported == "False"
