"""The wire helpers and the pipelined putter, against real servers (no Spark needed)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from cmdstalk_py.client.names import DEFAULT_PORT, check_u32, parse_address
from cmdstalk_py.spark.putter import MAX_PUT_REPLY, PutFailed, Putter
from tests.helpers import BeanstalkServer, free_port, running_beanstalkd
from tests.spark.rawjobs import drain_tube


def test_spark_addresses_default_to_port_11300() -> None:
    assert parse_address("127.0.0.1:11301", DEFAULT_PORT) == ("127.0.0.1", 11301)
    assert parse_address("example.org", DEFAULT_PORT) == ("example.org", 11300)
    assert parse_address("[::1]:7", DEFAULT_PORT) == ("::1", 7)
    for bad in ("", "h:x", "h:0", "h:70000", "[::1"):
        with pytest.raises(ValueError):
            parse_address(bad, DEFAULT_PORT)


def test_put_fields_follow_the_protocol() -> None:
    assert check_u32("ttr", 2**32 - 1) == 2**32 - 1
    for bad in (-1, 2**32):
        with pytest.raises(ValueError, match="ttr"):
            check_u32("ttr", bad)


def test_putter_checks_the_tube_name_with_the_one_rule(beanstalk: BeanstalkServer) -> None:
    for bad in ("", "-lead", "sp ace", "x" * 201, "é"):
        with pytest.raises(ValueError, match="invalid tube name"):
            Putter(beanstalk.address, tube=bad)


def test_putter_puts_every_body_exactly(beanstalk: BeanstalkServer) -> None:
    bodies = [b"", b"\r\n", b"\x00\xff" * 100, *(b"job %d" % i for i in range(5000))]
    with Putter(beanstalk.address, tube="exact", partition=0, budget=MAX_PUT_REPLY * 7) as put:
        put.put_batch(bodies[:3])
        put.put_batch(bodies[3:])
        stats = put.finish()
    assert stats.rows == len(bodies)
    assert stats.per_tube == {"exact": len(bodies)}
    assert sorted(drain_tube(beanstalk.address, "exact")) == sorted(bodies)


def test_putter_reports_job_too_big_with_row_and_counts(beanstalk: BeanstalkServer) -> None:
    bodies = [b"a", b"b", b"x" * 70_000, b"c"]  # beyond both servers' default 65535
    with Putter(beanstalk.address, tube="big", partition=4) as put:
        put.put_batch(bodies)
        with pytest.raises(PutFailed) as info:
            put.finish()
    err = info.value
    assert err.reply == "JOB_TOO_BIG"
    assert (err.partition, err.row, err.acknowledged) == (4, 2, 3)
    assert "partition 4" in str(err) and "row 2" in str(err) and "JOB_TOO_BIG" in str(err)
    # The connection stayed in step: the rows around the big one were all enqueued.
    assert sorted(drain_tube(beanstalk.address, "big")) == [b"a", b"b", b"c"]


def test_putter_connection_refused_names_address() -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(PutFailed, match="cannot connect") as info:
        Putter(address, partition=1)
    assert address in str(info.value) and info.value.reply == "CONNECTION_REFUSED"


class FakePeer:
    """A TCP peer speaking just enough of the put protocol to observe the client."""

    def __init__(self, serve: Callable[[socket.socket, FakePeer], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.received_puts = 0
        self.replied = 0
        self.max_unanswered = 0
        self.error: BaseException | None = None
        self._serve = serve
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                self._serve(conn, self)
        except BaseException as exc:  # surfaced by the test through .error
            self.error = exc

    def read_puts(self, conn: socket.socket, buf: bytes) -> tuple[bytes, int]:
        """Count complete one-byte-body puts in ``buf`` + what arrives; the rest and count."""
        chunk = conn.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk
        request = len(b"put 1024 0 60 1\r\nx\r\n")
        n = len(buf) // request
        self.received_puts += n
        self.max_unanswered = max(self.max_unanswered, self.received_puts - self.replied)
        return buf[n * request :], n

    def reply(self, conn: socket.socket, n: int) -> None:
        conn.sendall(b"".join(b"INSERTED %d\r\n" % (self.replied + i + 1) for i in range(n)))
        self.replied += n


@contextmanager
def fake_peer(serve: Callable[[socket.socket, FakePeer], None]) -> Iterator[FakePeer]:
    peer = FakePeer(serve)
    try:
        yield peer
    finally:
        peer.listener.close()
        peer.thread.join(timeout=10)


def test_putter_never_has_more_replies_outstanding_than_its_budget() -> None:
    def serve(conn: socket.socket, peer: FakePeer) -> None:
        buf = b""
        while peer.replied < 2000:
            buf, n = peer.read_puts(conn, buf)
            peer.reply(conn, n)

    with fake_peer(serve) as peer, Putter(peer.address, budget=MAX_PUT_REPLY * 5) as put:
        put.put_batch([b"x"] * 2000)
        assert put.finish().rows == 2000
    assert peer.error is None
    assert peer.received_puts == 2000
    assert 1 <= peer.max_unanswered <= 5


def test_putter_stops_at_the_budget_when_the_server_does_not_answer() -> None:
    def serve(conn: socket.socket, peer: FakePeer) -> None:
        buf = b""
        with contextlib.suppress(EOFError):
            while True:  # read everything, answer nothing
                buf, _ = peer.read_puts(conn, buf)

    with fake_peer(serve) as peer:
        put = Putter(peer.address, budget=MAX_PUT_REPLY * 7, timeout=1.0)
        with put, pytest.raises(PutFailed) as info:
            put.put_batch([b"x"] * 50)
            put.finish()
        assert info.value.reply == "CONNECTION_LOST" and "timed out" in str(info.value)
        peer.thread.join(10)
    # A broken window would have sent all 50 puts before waiting for any reply.
    assert 1 <= peer.received_puts <= 7 and peer.error is None


def test_putter_reports_connection_loss_with_acknowledged_count() -> None:
    def serve(conn: socket.socket, peer: FakePeer) -> None:
        buf = b""
        while peer.received_puts < 10:
            buf, _ = peer.read_puts(conn, buf)
        peer.reply(conn, 10)

    with fake_peer(serve) as peer, Putter(peer.address, partition=2, budget=4096) as put:
        put.put_batch([b"x"] * 50)
        with pytest.raises(PutFailed) as info:
            put.finish()
    err = info.value
    assert err.reply == "CONNECTION_LOST" and err.partition == 2
    assert err.acknowledged == 10 and err.row == 10
    assert "partition 2" in str(err) and "lost" in str(err)


def test_putter_large_bodies_span_many_chunks(beanstalk: BeanstalkServer) -> None:
    bodies = [bytes([i]) * 60_000 for i in range(40)]  # 2.4 MB: about ten 256 KiB sends
    with Putter(beanstalk.address, tube="large") as put:
        put.put_batch(bodies)
        assert put.finish().body_bytes == 2_400_000
    assert sorted(drain_tube(beanstalk.address, "large")) == sorted(bodies)


def test_error_after_the_first_window_fails_at_once_naming_the_row() -> None:
    # A server that accepts 1-byte bodies only: row 300 is refused long after the first
    # window. The putter must not wait for replies to requests it never sent.
    with running_beanstalkd("-z", "1") as server:
        bodies = [b"x"] * 300 + [b"too big"] + [b"x"] * 700
        with (
            Putter(
                server.address, tube="w", partition=3, budget=MAX_PUT_REPLY * 20, timeout=20
            ) as put,
            pytest.raises(PutFailed) as info,
        ):
            put.put_batch(bodies)
            put.finish()
        err = info.value
        # Waiting for replies never due would end in the socket's timeout: CONNECTION_LOST.
        assert (err.reply, err.partition, err.row) == ("JOB_TOO_BIG", 3, 300), str(err)
        assert "partition 3" in str(err) and "row 300" in str(err)
        # What the error counts as enqueued is what the server holds.
        held = server.client().stats_tube("w")["current-jobs-ready"]
        assert err.acknowledged == held and 300 <= held < 1000
