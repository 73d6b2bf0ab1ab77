"""``reader``, ``pipeline.Client`` and ``connection``: replies off real sockets.

Real sockets throughout: a socketpair for the reader, a listening socket that accepts and
never answers for the timeout. (``reply_ready`` is tested with pipelining, against both
servers.) ``Client`` is checked against greenstalk's client on both servers, and
``parse_stats`` against greenstalk's parser on both servers' replies.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import greenstalk
import pytest

from cmdstalk_py.client.errors import (
    CONNECTION_ERRORS,
    BeanstalkdError,
    ConnectionLost,
    UnexpectedReply,
)
from cmdstalk_py.client.pipeline import Client, Job
from cmdstalk_py.client.reader import Reader, set_io_timeout
from cmdstalk_py.client.replies import parse_stats
from tests.helpers import BeanstalkServer


def test_reader_splits_lines_and_bodies_whatever_the_segments() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        reader = Reader(ours)
        theirs.sendall(b"RESERVED 7 5\r\nhel")
        assert reader.read_line() == b"RESERVED 7 5"
        assert reader.buffered == 3
        theirs.sendall(b"lo\r\nDELE")
        assert reader.read_body(5) == b"hello"
        assert reader.buffered == 4
        theirs.sendall(b"TED\r\nNOT_FOUND\r\nUSING a\r")
        assert reader.read_line() == b"DELETED"
        assert reader.read_line() == b"NOT_FOUND"
        theirs.sendall(b"\nWATCHING 1\r\nWATCH")
        assert reader.read_lines() == [b"USING a", b"WATCHING 1"]
        assert reader.buffered == 5
        # End of stream: a connection-level error, whatever was left.
        theirs.sendall(b"ING 2")
        theirs.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionLost, match="Unexpected EOF"):
            reader.read_line()
        with pytest.raises(ConnectionLost):
            reader.read_body(10)
        with pytest.raises(ConnectionLost):
            reader.read_lines()


def test_reader_rejects_a_line_or_block_without_crlf() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        reader = Reader(ours)
        theirs.sendall(b"DELETED\nOK 3\r\nabcXY")
        with pytest.raises(UnexpectedReply):
            reader.read_line()
        assert reader.read_line() == b"OK 3"
        with pytest.raises(UnexpectedReply):
            reader.read_body(3)


def test_reader_reads_a_body_larger_than_one_receive() -> None:
    ours, theirs = socket.socketpair()
    body = bytes(range(256)) * 8192 + b"\r\n"  # 2 MiB + CRLF, many recv calls
    sender = threading.Thread(target=theirs.sendall, args=(b"OK %d\r\n" % (len(body) - 2) + body,))
    with ours, theirs:
        sender.start()
        reader = Reader(ours)
        assert reader.read_line() == b"OK %d" % (len(body) - 2)
        assert reader.read_body(len(body) - 2) == body[:-2]
        sender.join(10)
        assert reader.buffered == 0


@contextmanager
def silent_server() -> Iterator[tuple[str, int]]:
    """Accepts connections and reads whatever comes, but never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


def test_a_silent_server_fails_a_command_after_the_io_timeout() -> None:
    with silent_server() as (host, port):
        sock = socket.create_connection((host, port), timeout=5)
        set_io_timeout(sock, 0.3)
        sock.settimeout(None)  # the kernel's timeout alone
        client = Client(sock, io_timeout=0.3)
        started = time.monotonic()
        with pytest.raises(TimeoutError) as raised:
            client.tubes()
        waited = time.monotonic() - started
        client.close()
    # The line a broker logs when it drops the connection.
    assert str(raised.value) == "no reply from the server in 0.3s"
    assert 0.25 <= waited < 5


# -- parse_stats: greenstalk's result on both servers' replies ------------------------------


def _raw_reply(sock: socket.socket, command: bytes) -> bytes:
    """The body of an ``OK <bytes>`` reply to ``command``, read off a plain socket."""
    sock.sendall(command + b"\r\n")
    reader = Reader(sock)
    head = reader.read_line()
    assert head.startswith(b"OK "), head
    return reader.read_body(int(head.split()[1]))


def test_parse_stats_gives_what_greenstalk_gives_for_every_stats_reply(
    beanstalk: BeanstalkServer,
) -> None:
    with socket.create_connection((beanstalk.host, beanstalk.port), timeout=10) as sock:
        producer = greenstalk.Client((beanstalk.host, beanstalk.port), use="parse-me")
        try:
            job_id = producer.put("x", priority=7, ttr=30)
            bodies = [
                _raw_reply(sock, b"stats-job %d" % job_id),
                _raw_reply(sock, b"stats-tube parse-me"),
                _raw_reply(sock, b"stats"),  # strings: version, hostname, os, platform...
            ]
        finally:
            producer.close()
    for body in bodies:
        assert parse_stats(body) == greenstalk._parse_stats(body)
    job = parse_stats(bodies[0])
    assert (job["id"], job["tube"], job["state"], job["pri"]) == (job_id, "parse-me", "ready", 7)


# -- Client: greenstalk's results, and its exceptions as reply words ------------------------

_GREENSTALK_WORDS = {cls: word.decode() for word, cls in greenstalk.ERROR_RESPONSES.items()}


def _outcome(step: Callable[[], object]) -> object:
    """What a client call gave: its value, or the reply word of the exception it raised."""
    try:
        value = step()
    except BeanstalkdError as e:
        return e.reply
    except greenstalk.Error as e:
        return _GREENSTALK_WORDS.get(type(e), type(e).__name__)
    if isinstance(value, (greenstalk.Job, Job)):
        return ("job", value.id, value.body)
    return value


def _session(client: Any, tube: str) -> list[object]:
    body = bytes(range(256)) + b"\r\nRESERVED 9 9\r\n"
    steps: list[Callable[[], object]] = [
        lambda: client.use(tube),
        lambda: client.watch(tube),
        lambda: client.ignore("default"),
        lambda: client.reserve(timeout=0),  # TIMED_OUT
        lambda: client.put(body, ttr=1) > 0,
        lambda: client.reserve(timeout=0),
        lambda: client.reserve(timeout=5),  # DEADLINE_SOON: that job's TTR ends within 1 s
        lambda: client.stats_job(2**40)["id"],  # NOT_FOUND
        lambda: client.delete(2**40),  # NOT_FOUND
        lambda: client.put(b"", ttr=1) > 0,
        lambda: client.reserve(),  # an empty body
        lambda: sorted(client.stats_tube(tube).items())[:3],
    ]
    return [_outcome(step) for step in steps]


def test_reserve_and_stats_job_give_what_greenstalk_gives(beanstalk: BeanstalkServer) -> None:
    address = (beanstalk.host, beanstalk.port)
    plain: greenstalk.Client[bytes] = greenstalk.Client(address, encoding=None)
    ours = Client.connect(beanstalk.address, timeout=5)
    try:
        theirs_seen = _session(plain, "same-a")
        ours_seen = _session(ours, "same-b")
    finally:
        ours.close()
        plain.close()
    # Job ids differ between the two tubes' jobs; everything else must match.
    strip = [(o[0], o[2]) if isinstance(o, tuple) and o[0] == "job" else o for o in ours_seen]
    want = [(o[0], o[2]) if isinstance(o, tuple) and o[0] == "job" else o for o in theirs_seen]
    assert strip == want
    assert ours_seen[3] == "TIMED_OUT" and ours_seen[6] == "DEADLINE_SOON"
    assert ours_seen[7] == ours_seen[8] == "NOT_FOUND" and ours_seen[10][2] == b""  # type: ignore[index]
    assert ours_seen[5][2].startswith(bytes(range(256)))  # type: ignore[index]


def _job_of(client: Any, job_id: int) -> object:
    """What each client's bury / release take: greenstalk a ``Job``, ours an id."""
    return job_id if isinstance(client, Client) else greenstalk.Job(job_id, b"")


def _more_commands(client: Any, tube: str) -> list[object]:
    held: dict[str, int] = {}

    def reserve() -> object:
        job = client.reserve(timeout=0)
        held["id"] = job.id
        return job

    steps: list[Callable[[], object]] = [
        lambda: client.use(tube),
        lambda: client.watch(tube),  # 2: default and this one
        lambda: client.ignore("default"),  # 1
        lambda: client.ignore(tube),  # NOT_IGNORED: the last watched tube
        lambda: client.peek_buried(),  # NOT_FOUND: nothing buried yet
        lambda: client.put(b"first", priority=5, ttr=30) > 0,
        reserve,
        lambda: client.bury(_job_of(client, held["id"]), 9),
        lambda: client.peek_buried().body,
        lambda: client.stats_job(held["id"])["state"],
        lambda: client.reserve_job(held["id"]).body,
        lambda: client.release(_job_of(client, held["id"]), 3, 0),
        lambda: client.stats_job(held["id"])["pri"],
        lambda: client.reserve_job(2**40),  # NOT_FOUND
        lambda: client.stats_tube(tube)["name"],
        lambda: client.stats_tube("no-such-tube"),  # NOT_FOUND
        lambda: tube in client.tubes(),
        lambda: client.delete(held["id"]),
        lambda: client.stats_tube(tube)["current-jobs-ready"],
    ]
    return [_outcome(step) for step in steps]


def test_the_other_commands_give_what_greenstalk_gives(beanstalk: BeanstalkServer) -> None:
    plain: greenstalk.Client[bytes] = greenstalk.Client(
        (beanstalk.host, beanstalk.port), encoding=None
    )
    ours = Client.connect(beanstalk.address, timeout=5)
    try:
        theirs_seen = _more_commands(plain, "more-a")
        ours_seen = _more_commands(ours, "more-b")
    finally:
        ours.close()
        plain.close()
    same_tube = [o if o != "more-a" else "more-b" for o in theirs_seen]
    assert [o[0] if isinstance(o, tuple) else o for o in ours_seen] == [
        o[0] if isinstance(o, tuple) else o for o in same_tube
    ]
    assert ours_seen[1:5] == [2, 1, "NOT_IGNORED", "NOT_FOUND"]
    assert ours_seen[8:13] == [b"first", "buried", b"first", None, 3]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"RESERVED 1 10\r\nabc", ConnectionLost),  # EOF inside the body
        (b"RESERVED 1 3\r\nabcXY", UnexpectedReply),  # no CRLF after it
        (b"RESERVED 1\r\n", UnexpectedReply),  # one number missing
        (b"RESERVED x 1\r\n", UnexpectedReply),
        (b"HELLO 1 2\r\n", UnexpectedReply),
        (b"\r\n", UnexpectedReply),
        (b"RESERVED 1 3\n", UnexpectedReply),  # LF without CR
        (b"RESERVED 1 3", ConnectionLost),  # EOF before the CRLF
        (b"", ConnectionLost),
    ],
)
def test_a_broken_reserve_reply_raises_a_connection_error(
    reply: bytes, error: type[BaseException]
) -> None:
    near, far = socket.socketpair()
    try:
        far.sendall(reply)
        far.shutdown(socket.SHUT_WR)
        client = Client(near)
        with pytest.raises(CONNECTION_ERRORS) as raised:
            client.reserve(timeout=0)
        assert isinstance(raised.value, error)
        assert not isinstance(raised.value, (ValueError, AssertionError))
    finally:
        near.close()
        far.close()


def test_connection_errors_are_no_longer_programming_errors() -> None:
    # A bug that raises ValueError or AssertionError must not pass for a lost server.
    assert not any(issubclass(e, (ValueError, AssertionError)) for e in CONNECTION_ERRORS)
