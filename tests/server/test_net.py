"""The network layer through real sockets on an EmbeddedServer."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator

import pytest

from cmdstalk_py.server import conn, net
from cmdstalk_py.server.embedded import EmbeddedServer
from tests.helpers import accepts_connections, wait_until


@pytest.fixture
def srv() -> Iterator[EmbeddedServer]:
    with EmbeddedServer() as server:
        yield server


class Client:
    """A raw socket with a reply reader that understands data chunks."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    @classmethod
    def to(cls, srv: EmbeddedServer) -> Client:
        return cls(socket.create_connection(srv.address, timeout=60))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("server closed the connection")
        self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self) -> bytes:
        """One reply; for RESERVED/FOUND/OK the line and the data chunk."""
        line = self.line()
        word = line.split(b" ")[0]
        if word in (b"RESERVED", b"FOUND", b"OK"):
            size = int(line.split(b" ")[-1])
            while len(self.buf) < size + 2:
                self._fill()
            data, self.buf = self.buf[:size], self.buf[size + 2 :]
            return line + b"\r\n" + data
        return line

    def nothing_pending(self, wait: float = 0.2) -> bool:
        self.sock.settimeout(wait)
        try:
            self._fill()
        except TimeoutError:
            return not self.buf
        finally:
            self.sock.settimeout(60)
        return False

    def stats(self) -> dict[str, str]:
        self.send(b"stats\r\n")
        body = self.reply().split(b"\r\n", 1)[1].decode()
        return dict(row.split(": ", 1) for row in body.splitlines()[1:])

    def close(self) -> None:
        self.sock.close()


def test_pipelined_commands_answered_in_order(srv: EmbeddedServer) -> None:
    c = Client.to(srv)
    body = b"a\r\nb\x00c"
    c.send(b"use p\r\n" + b"".join(b"put %d 0 60 %d\r\n%b\r\n" % (i, len(body), body)
                                     for i in range(200)) + b"watch p\r\nignore default\r\n"
           + b"reserve\r\n" * 200 + b"list-tube-used\r\n")
    assert c.reply() == b"USING p"
    assert [c.reply() for _ in range(200)] == [b"INSERTED %d" % i for i in range(1, 201)]
    assert c.reply() == b"WATCHING 2"
    assert c.reply() == b"WATCHING 1"
    got = [c.reply() for _ in range(200)]
    assert got == [b"RESERVED %d %d\r\n%b" % (i, len(body), body) for i in range(1, 201)]
    assert c.reply() == b"USING p"
    c.close()


def test_blocked_reserve_holds_later_commands(srv: EmbeddedServer) -> None:
    worker, producer = Client.to(srv), Client.to(srv)
    worker.send(b"reserve\r\nlist-tube-used\r\nstats-job 1\r\n")
    wait_until(lambda: producer.stats()["current-waiting"] == "1", message="worker waiting")
    assert worker.nothing_pending()
    producer.send(b"put 0 0 60 2\r\nhi\r\n")
    assert producer.reply() == b"INSERTED 1"
    assert worker.reply() == b"RESERVED 1 2\r\nhi"
    assert worker.reply() == b"USING default"
    assert worker.reply().startswith(b"OK ")
    worker.close()
    producer.close()


def test_half_close_while_waiting_times_out_then_closes(srv: EmbeddedServer) -> None:
    c, watcher = Client.to(srv), Client.to(srv)
    c.send(b"reserve\r\n")
    wait_until(lambda: watcher.stats()["current-waiting"] == "1", message="waiting")
    c.sock.shutdown(socket.SHUT_WR)
    assert c.reply() == b"TIMED_OUT"
    with pytest.raises(EOFError):
        c.reply()
    wait_until(lambda: watcher.stats()["current-connections"] == "1", message="closed")


def test_half_close_with_pipelined_commands(srv: EmbeddedServer) -> None:
    c = Client.to(srv)
    c.send(b"put 0 0 60 1\r\nx\r\nreserve\r\nreserve\r\nlist-tube-used\r\n")
    c.sock.shutdown(socket.SHUT_WR)
    assert c.reply() == b"INSERTED 1"
    assert c.reply() == b"RESERVED 1 1\r\nx"
    assert c.reply() == b"TIMED_OUT"
    assert c.reply() == b"USING default"
    with pytest.raises(EOFError):
        c.reply()


def test_half_close_behind_backed_up_output_runs_every_command(srv: EmbeddedServer) -> None:
    """Input left when the output backs up is run once it drains, then the socket closes."""
    size = 65535
    c = Client.to(srv)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    c.send(b"put 0 0 60 %d\r\n%b\r\n" % (size, b"q" * size))
    assert c.reply() == b"INSERTED 1"
    count = 300  # more replies than the kernel buffers and WRITE_HIGH hold
    c.send(b"peek 1\r\n" * count + b"list-tube-used\r\n")
    c.sock.shutdown(socket.SHUT_WR)

    def backed_up(server: net.Server) -> bool:
        return any(sc.backed_up for sc in server.connections.values())

    wait_until(lambda: srv.call(backed_up), timeout=20, message="output backs up")
    for _ in range(count):
        assert c.reply() == b"FOUND 1 %d\r\n%b" % (size, b"q" * size)
    assert c.reply() == b"USING default"
    with pytest.raises(EOFError):
        c.reply()


def test_connection_state_follows_a_blocked_reserve(srv: EmbeddedServer) -> None:
    worker, producer = Client.to(srv), Client.to(srv)

    def states(server: net.Server) -> list[conn.State]:
        return [sc.state for sc in server.connections.values()]

    assert srv.call(states) == [conn.State.OPEN, conn.State.OPEN]
    worker.send(b"reserve\r\n")
    wait_until(lambda: conn.State.WAITING in srv.call(states), message="worker waiting")
    producer.send(b"put 0 0 60 2\r\nhi\r\n")
    assert worker.reply() == b"RESERVED 1 2\r\nhi"
    assert srv.call(states) == [conn.State.OPEN, conn.State.OPEN]
    worker.send(b"quit\r\n")
    wait_until(lambda: len(srv.call(states)) == 1, message="worker closed")


def test_disconnect_releases_reserved_jobs_at_once(srv: EmbeddedServer) -> None:
    owner, other = Client.to(srv), Client.to(srv)
    owner.send(b"put 0 0 3600 1\r\nx\r\nreserve\r\n")
    assert owner.reply() == b"INSERTED 1"
    assert owner.reply().startswith(b"RESERVED 1")
    # Long enough that a timeout can only mean the job was not given back on the close.
    other.send(b"reserve-with-timeout 120\r\n")
    owner.close()
    assert other.reply() == b"RESERVED 1 1\r\nx"


def test_quit_closes_and_ignores_the_rest(srv: EmbeddedServer) -> None:
    c = Client.to(srv)
    c.send(b"list-tube-used\r\nquit\r\nput 0 0 1 1\r\nx\r\n")
    assert c.reply() == b"USING default"
    with pytest.raises(EOFError):
        c.reply()
    c2 = Client.to(srv)
    assert c2.stats()["total-jobs"] == "0"


def test_framing_edge_cases_byte_by_byte(srv: EmbeddedServer) -> None:
    c = Client.to(srv)
    stream = (
        b"put 0 0 60 4\r\n\r\n\r\n\r\n"  # a body made of CRLFs
        + b"put 0 0 60 3\r\nabcde\r\n"  # EXPECTED_CRLF, then an empty command
        + b"put 0 0 60 70000\r\n" + b"z" * 70002  # JOB_TOO_BIG after the body
        + b"x" * 300 + b"\r\n"  # too long: BAD_FORMAT
        + b"bad\x00line\r\n"
        + b"peek 1\r\n"
    )
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head, tail = stream[:60], stream[60:]
    for i in range(len(head)):
        c.send(head[i : i + 1])
    c.send(tail)
    assert c.reply() == b"INSERTED 1"
    assert c.reply() == b"EXPECTED_CRLF"
    assert c.reply() == b"UNKNOWN_COMMAND"
    assert c.reply() == b"JOB_TOO_BIG"
    assert c.reply() == b"BAD_FORMAT"
    assert c.reply() == b"BAD_FORMAT"
    assert c.reply() == b"FOUND 1 4\r\n\r\n\r\n"
    # A bare \r stalls a line until 224 bytes have arrived; then the too-long rule applies.
    c.send(b"stats\rjunk\r\n")
    assert c.nothing_pending()
    c.send(b"y" * 220 + b"\r\nlist-tube-used\r\n")
    assert c.reply() == b"BAD_FORMAT"
    assert c.reply() == b"USING default"


def test_garbage_does_not_hurt_other_connections(srv: EmbeddedServer) -> None:
    rnd = bytes(range(256)) * 400
    bad = Client.to(srv)
    good = Client.to(srv)
    bad.send(rnd)
    good.send(b"list-tube-used\r\n")
    assert good.reply() == b"USING default"
    bad.close()
    assert good.stats()["current-connections"] in ("1", "2")


def test_disconnect_mid_body(srv: EmbeddedServer) -> None:
    c = Client.to(srv)
    c.send(b"put 0 0 60 100\r\nonly part")
    c.close()
    other = Client.to(srv)
    wait_until(lambda: other.stats()["current-connections"] == "1", message="closed")
    assert other.stats()["total-jobs"] == "0"


def test_slow_reader_is_bounded_and_does_not_block_others(srv: EmbeddedServer) -> None:
    size = 65535
    reader = Client.to(srv)
    reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    reader.send(b"put 0 0 60 %d\r\n%b\r\n" % (size, b"q" * size))
    assert reader.reply() == b"INSERTED 1"
    count = 1500  # ~100 MB of replies that nobody reads for a while
    sender = threading.Thread(target=reader.send, args=(b"peek 1\r\n" * count,), daemon=True)
    sender.start()

    def held() -> tuple[int, int, bool]:
        def probe(server: net.Server) -> tuple[int, int, bool]:
            conn = max(server.connections.values(), key=lambda c: c.out_size)
            return conn.out_size, conn.framer.buffered, conn.backed_up

        result: tuple[int, int, bool] = srv.call(probe)
        return result

    # The kernel buffers fill up, then the server stops producing replies for this client.
    wait_until(lambda: held()[2], timeout=20, message="server holds back the slow reader")
    sender.join(timeout=60)
    out_buffered, in_buffered, _ = held()
    assert out_buffered <= conn.WRITE_HIGH + conn.FLUSH_AT + 2 * size
    assert in_buffered <= conn.INPUT_LIMIT
    other = Client.to(srv)
    other.send(b"list-tube-used\r\n")
    assert other.reply() == b"USING default"
    # Now read everything: every reply arrives, in order and intact.
    for _ in range(count):
        assert reader.reply() == b"FOUND 1 %d\r\n%b" % (size, b"q" * size)
    sender.join(timeout=60)


def test_timeouts_and_ttr_expiry_without_client_action(srv: EmbeddedServer) -> None:
    c, watcher = Client.to(srv), Client.to(srv)
    c.send(b"put 0 0 1 1\r\nx\r\nreserve\r\n")
    assert c.reply() == b"INSERTED 1"
    assert c.reply() == b"RESERVED 1 1\r\nx"

    def ready() -> bool:
        watcher.send(b"stats-job 1\r\n")
        return b"state: ready" in watcher.reply()

    wait_until(ready, timeout=60, interval=0.02, message="TTR expiry")
    waiters = [Client.to(srv) for _ in range(5)]
    for w in waiters:
        w.send(b"watch none\r\nignore default\r\nreserve-with-timeout 1\r\n")
    for w in waiters:
        assert w.reply() == b"WATCHING 2"
        assert w.reply() == b"WATCHING 1"
        assert w.reply() == b"TIMED_OUT"


def test_unix_socket() -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "beanstalk.sock")
        with EmbeddedServer(unix_path=path) as srv:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            c = Client(s)
            c.send(b"put 1 0 60 3\r\nabc\r\nreserve\r\n")
            assert c.reply() == b"INSERTED 1"
            assert c.reply() == b"RESERVED 1 3\r\nabc"
            tcp = Client.to(srv)
            assert tcp.stats()["current-connections"] == "2"
            c.close()
        assert not os.path.exists(path)


def test_max_job_size_and_drain() -> None:
    with EmbeddedServer(max_job_size=10) as srv:
        c = Client.to(srv)
        c.send(b"put 0 0 1 11\r\n" + b"a" * 11 + b"\r\nput 0 0 1 10\r\n" + b"a" * 10 + b"\r\n")
        assert c.reply() == b"JOB_TOO_BIG"
        assert c.reply() == b"INSERTED 1"
        srv.drain()
        c.send(b"put 0 0 1 1\r\nx\r\n")
        assert c.reply() == b"DRAINING"
        st = c.stats()
        assert (st["draining"], st["max-job-size"]) == ("true", "10")


def test_stop_is_clean_and_idempotent() -> None:
    before = threading.active_count()
    srv = EmbeddedServer().start()
    host, port = srv.address
    c = Client.to(srv)
    c.send(b"reserve\r\n")
    watcher = Client.to(srv)
    wait_until(lambda: watcher.stats()["current-waiting"] == "1", message="waiting")
    srv.stop()
    srv.stop()
    assert threading.active_count() == before
    assert not accepts_connections(host, port)
    with pytest.raises(EOFError):
        c.reply()
    with pytest.raises(RuntimeError):
        _ = srv.address


def test_start_failure_is_raised() -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        with pytest.raises(OSError):
            EmbeddedServer(port=blocker.getsockname()[1]).start()
    finally:
        blocker.close()
