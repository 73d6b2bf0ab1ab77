"""``connection``: the reply reader and the kernel-enforced I/O timeout.

Real sockets throughout: a socketpair for the reader, a listening socket that accepts and
never answers for the timeout. (``reply_ready`` is tested with pipelining, against both
servers.) ``parse_stats`` is checked against greenstalk's parser on both servers' replies.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import greenstalk
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cmdstalk_py.client.connection import (
    CONNECTION_ERRORS,
    Client,
    HealingConnection,
    LineReader,
    parse_stats,
    set_io_timeout,
)
from tests.helpers import BeanstalkServer


def test_reader_splits_lines_and_bodies_whatever_the_segments() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        reader = LineReader(ours)
        theirs.sendall(b"RESERVED 7 5\r\nhel")
        assert reader.readline() == b"RESERVED 7 5\r\n"
        assert reader.buffered == 3
        theirs.sendall(b"lo\r\nDELE")
        assert reader.read(7) == b"hello\r\n"
        assert reader.buffered == 4
        theirs.sendall(b"TED\r\nNOT_FOUND\r\n")
        assert reader.readline() == b"DELETED\r\n"
        assert reader.readline() == b"NOT_FOUND\r\n"
        assert reader.buffered == 0
        # End of stream: what is left, then nothing (greenstalk rejects both).
        theirs.sendall(b"PARTIAL")
        theirs.shutdown(socket.SHUT_WR)
        assert reader.readline() == b"PARTIAL"
        assert reader.readline() == b""
        assert reader.read(10) == b""


def test_reader_reads_a_body_larger_than_one_receive() -> None:
    ours, theirs = socket.socketpair()
    body = bytes(range(256)) * 8192 + b"\r\n"  # 2 MiB + CRLF, many recv calls
    sender = threading.Thread(target=theirs.sendall, args=(b"OK %d\r\n" % (len(body) - 2) + body,))
    with ours, theirs:
        sender.start()
        reader = LineReader(ours)
        assert reader.readline() == b"OK %d\r\n" % (len(body) - 2)
        assert reader.read(len(body)) == body
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
        sock.settimeout(None)  # the kernel's timeout alone, as HealingConnection sets it up
        client = Client(sock, use="default", watch="default", io_timeout=0.3)
        started = time.monotonic()
        with pytest.raises(TimeoutError) as raised:
            client.stats()
        waited = time.monotonic() - started
        client.close()
    # The line a broker logs when it drops the connection.
    assert str(raised.value) == "no reply from the server in 0.3s"
    assert 0.25 <= waited < 5


def test_connection_sets_the_io_timeout_on_its_sockets() -> None:
    with silent_server() as (host, port):
        connection = HealingConnection(
            host, port, where="t:0", stop=threading.Event(), io_timeout=0.3
        )
        client = connection.client()  # default tubes: nothing to send while connecting
        try:
            with pytest.raises(TimeoutError) as raised:
                client.stats()
        finally:
            connection.close()
    # The kernel's timeout, not a Python-level one (that one says "timed out").
    assert str(raised.value) == "no reply from the server in 0.3s"



# -- parse_stats: greenstalk's result, without its exceptions --------------------------------


def _raw_reply(sock: socket.socket, command: bytes) -> bytes:
    """The body of an ``OK <bytes>`` reply to ``command``, read off a plain socket."""
    sock.sendall(command + b"\r\n")
    reader = LineReader(sock)
    head = reader.readline()
    assert head.startswith(b"OK "), head
    size = int(head.split()[1])
    body = reader.read(size + 2)
    assert body.endswith(b"\r\n")
    return body[:-2]


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


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z-]{0,15}", fullmatch=True),
        st.one_of(
            st.integers(-(2**63), 2**64),
            st.from_regex(r"[A-Za-z0-9._/ +-]{0,20}", fullmatch=True),
            st.from_regex(r'"[A-Za-z0-9.]{0,8}"', fullmatch=True),
        ),
    )
)
def test_parse_stats_matches_greenstalk_on_any_flat_yaml(fields: dict[str, object]) -> None:
    body = ("---\n" + "".join(f"{k}: {v}\n" for k, v in fields.items())).encode()
    values = [str(v) for v in fields.values()]
    # greenstalk's int() also takes " 5", "+5" and "1_000", which no beanstalkd writes.
    assume(not any(v != v.strip() or v.startswith("+") or "_" in v for v in values))
    assert parse_stats(body) == greenstalk._parse_stats(body)


def test_parse_stats_rejects_what_is_not_a_stats_reply() -> None:
    for body in (b"id: 1\n", b"---\nid 1\n"):
        with pytest.raises(ValueError):
            parse_stats(body)


# -- reserve / stats-job / replies: greenstalk's results and exceptions, fewer calls --------


def _outcome(step: Callable[[], object]) -> object:
    """What a client call gave: its value, or the name of the exception it raised."""
    try:
        value = step()
    except Exception as e:  # the exception is the result compared
        return type(e).__name__
    if isinstance(value, greenstalk.Job):
        return ("job", value.id, value.body)
    return value


def _session(client: greenstalk.Client[bytes], tube: str) -> list[object]:
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
    sock = socket.create_connection(address, timeout=5)
    ours = Client(sock, use="default", watch="default")
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
    assert ours_seen[3] == "TimedOutError" and ours_seen[6] == "DeadlineSoonError"
    assert ours_seen[7] == ours_seen[8] == "NotFoundError" and ours_seen[10][2] == b""  # type: ignore[index]
    assert ours_seen[5][2].startswith(bytes(range(256)))  # type: ignore[index]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"RESERVED 1 10\r\nabc", (ConnectionError, AssertionError)),  # EOF inside the body
        (b"RESERVED 1 3\r\nabcXY", (ConnectionError, AssertionError)),  # no CRLF after it
        (b"RESERVED 1\r\n", (ValueError,)),  # one number missing
        (b"RESERVED x 1\r\n", (ValueError,)),
        (b"HELLO 1 2\r\n", (greenstalk.UnknownResponseError,)),
        (b"\r\n", (ValueError,)),
        (b"RESERVED 1 3", (AssertionError,)),  # EOF before the CRLF
        (b"", (ConnectionError,)),
    ],
)
def test_a_broken_reserve_reply_raises_a_connection_error(
    reply: bytes, error: tuple[type[BaseException], ...]
) -> None:
    near, far = socket.socketpair()
    try:
        far.sendall(reply)
        far.shutdown(socket.SHUT_WR)
        client = Client(near, use="default", watch="default")
        with pytest.raises(CONNECTION_ERRORS) as raised:
            client.reserve(timeout=0)
        assert isinstance(raised.value, error)
    finally:
        near.close()
        far.close()
