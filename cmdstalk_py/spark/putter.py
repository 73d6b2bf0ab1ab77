"""Pipelined ``put``s over one raw socket, in windows bounded by the socket's receive buffer.

Sending many requests before reading any reply is what makes enqueueing fast, and also what
can deadlock: if replies pile up beyond what the socket buffers hold, the server blocks
writing them, stops reading our requests, and our ``sendall`` blocks forever. So the putter
counts an upper bound of the reply bytes it has not read yet (31 bytes for ``INSERTED <id>``)
and never lets that bound exceed a budget derived from our socket's receive buffer: before
sending more requests it reads replies until the new ones fit. The server then never blocks
writing, so it keeps reading, so ``sendall`` always completes.

Every reply is checked in order; the first error stops the partition with a message naming
the partition, the row, the tube and the server's reply. The connection, the reply reading
and the reply table are the client package's (``client.pipeline.Client``); the windows are
this module's.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from cmdstalk_py.client.errors import BeanstalkdError, ConnectionLost, error_for
from cmdstalk_py.client.names import check_u32, tube_bytes
from cmdstalk_py.client.pipeline import Client

MAX_PUT_REPLY = len(b"INSERTED 18446744073709551615\r\n")
USE_REPLY_OVERHEAD = len(b"USING \r\n")
CHUNK_BYTES = 256 * 1024  # requests gathered before one sendall
MIN_BUDGET = 4096
_USE = -1  # marker in the expectation queue for a `use` command


class PutFailed(Exception):
    """A put (or the connection) failed; the message names partition, row, tube and reply."""

    def __init__(
        self,
        message: str,
        *,
        reply: str,
        partition: int | None,
        row: int | None,
        acknowledged: int,
        unconfirmed: int = 0,
    ) -> None:
        super().__init__(message)
        self.reply = reply
        self.partition = partition
        self.row = row
        self.acknowledged = acknowledged
        self.unconfirmed = unconfirmed  # sent, never answered: in the queue or not

    @property
    def deterministic(self) -> bool:
        """Whether trying the same rows again would fail the same way (an error reply or
        an invalid row, as opposed to a connection that broke or could not be made)."""
        return self.reply not in ("CONNECTION_LOST", "CONNECTION_REFUSED")


@dataclass
class PutStats:
    """What one putter enqueued: rows, body bytes, rows per tube."""

    rows: int = 0
    body_bytes: int = 0
    per_tube: dict[str, int] = field(default_factory=dict)


def reply_budget(sock: socket.socket, override: int | None = None) -> int:
    """Bytes of unread replies we allow: a quarter of SO_RCVBUF (Linux reports it doubled,
    and half of the rest is kernel bookkeeping), so the replies always fit in our buffer."""
    if override is not None:
        return max(MAX_PUT_REPLY, override)
    rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    return max(MIN_BUDGET, rcvbuf // 4)


class Putter:
    """One connection's pipelined puts. Use as a context manager; call :meth:`finish`."""

    def __init__(
        self,
        address: str,
        tube: str = "default",
        priority: int = 1024,
        delay: int = 0,
        ttr: int = 60,
        *,
        partition: int | None = None,
        budget: int | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.address = address
        self.partition = partition
        self.default_tube = tube
        tube_bytes(tube)
        self.priority = check_u32("priority", priority)
        self.delay = check_u32("delay", delay)
        self.ttr = check_u32("ttr", ttr)
        try:
            self._conn = Client.connect(address, timeout=timeout)
        except ConnectionLost as exc:
            raise PutFailed(
                f"{self._where(server=False)}: {exc}",
                reply="CONNECTION_REFUSED",
                partition=partition,
                row=None,
                acknowledged=0,
            ) from exc
        self.budget = reply_budget(self._conn.sock, budget)
        self.stats = PutStats()
        self._out = bytearray()  # requests not sent yet
        self._out_reply_bytes = 0  # reply bound of the requests in _out
        self._inflight_reply_bytes = 0  # reply bound of sent requests not yet answered
        self._expect: deque[int] = deque()  # row index per request; _USE for `use`
        self._unsent = 0  # entries at the tail of _expect whose requests are still in _out
        self._expect_tubes: deque[str] = deque()  # tube per `use` request, in order
        self._tube_sent = "default"  # the tube the server will use for the next put
        self._tube_acked = "default"  # the tube in effect for the next reply we read
        self._next_row = 0
        self._acked = 0  # rows the server answered INSERTED
        self._failed_rows = 0
        self._failure: tuple[int | None, str, bytes] | None = None  # (row, tube, reply)

    def __enter__(self) -> Putter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._conn.close()

    @property
    def queued(self) -> int:
        """Rows handed to the putter so far (sent or not, acknowledged or not)."""
        return self._next_row

    def _where(self, server: bool = True) -> str:
        # Rows may be spread over several servers: a failure names the one it came from,
        # unless the message names it already (a connection that failed or broke).
        return (
            "beanstalkd write"
            + (f" (partition {self.partition})" if self.partition is not None else "")
            + (f" to {self.address}" if server else "")
        )

    def put_batch(
        self,
        bodies: Sequence[bytes],
        tubes: Sequence[str | None] | None = None,
        priorities: Sequence[int | None] | None = None,
        delays: Sequence[int | None] | None = None,
        ttrs: Sequence[int | None] | None = None,
    ) -> None:
        """Queue ``bodies`` as jobs; per-row sequences (None entries: the defaults) override
        the tube, priority, delay and ttr. Requests go out as the window allows."""
        if tubes is None and priorities is None and delays is None and ttrs is None:
            self._put_uniform(bodies)
            return
        for i, body in enumerate(bodies):
            row = self._next_row
            tube = (tubes[i] if tubes is not None else None) or self.default_tube
            pri = priorities[i] if priorities is not None else None
            dly = delays[i] if delays is not None else None
            ttr = ttrs[i] if ttrs is not None else None
            try:
                if tube != self._tube_sent:
                    raw_tube = tube_bytes(tube)
                    self._expect.append(_USE)
                    self._expect_tubes.append(tube)
                    self._tube_sent = tube
                    self._queue(b"use %s\r\n" % raw_tube, USE_REPLY_OVERHEAD + len(raw_tube))
                header = b"put %d %d %d " % (
                    self.priority if pri is None else check_u32("priority", pri),
                    self.delay if dly is None else check_u32("delay", dly),
                    self.ttr if ttr is None else check_u32("ttr", ttr),
                )
            except ValueError as exc:
                raise PutFailed(
                    f"{self._where()}: row {row}: {exc}",
                    reply="INVALID_ROW",
                    partition=self.partition,
                    row=row,
                    acknowledged=self.stats.rows,
                ) from exc
            self._expect.append(row)
            self._next_row += 1
            self._queue(b"%s%d\r\n%s\r\n" % (header, len(body), body), MAX_PUT_REPLY)
            self.stats.per_tube[tube] = self.stats.per_tube.get(tube, 0) + 1
            self.stats.body_bytes += len(body)

    def _put_uniform(self, bodies: Sequence[bytes]) -> None:
        # The hot path: every row takes the defaults, so one header serves them all.
        if self.default_tube != self._tube_sent:
            raw_tube = tube_bytes(self.default_tube)
            self._expect.append(_USE)
            self._expect_tubes.append(self.default_tube)
            self._tube_sent = self.default_tube
            self._queue(b"use %s\r\n" % raw_tube, USE_REPLY_OVERHEAD + len(raw_tube))
        header = b"put %d %d %d " % (self.priority, self.delay, self.ttr)
        expect = self._expect
        total = 0
        i, n = 0, len(bodies)
        while i < n:
            # Rows that fit in this chunk: its replies take at most half the budget, its
            # requests at most CHUNK_BYTES (checked per row: bodies may be large).
            room = (self.budget // 2 - self._out_reply_bytes) // MAX_PUT_REPLY
            end = min(n, i + max(1, room))
            out = self._out
            start = i
            while i < end and len(out) < CHUNK_BYTES:
                body = bodies[i]
                out += b"%s%d\r\n%s\r\n" % (header, len(body), body)
                total += len(body)
                i += 1
            expect.extend(range(self._next_row, self._next_row + i - start))
            self._unsent += i - start
            self._next_row += i - start
            self._out_reply_bytes += MAX_PUT_REPLY * (i - start)
            self._maybe_flush()
        tube = self.default_tube
        self.stats.per_tube[tube] = self.stats.per_tube.get(tube, 0) + n
        self.stats.body_bytes += total

    def _queue(self, request: bytes, reply_bound: int) -> None:
        # The caller has appended the request's expectation to _expect.
        self._unsent += 1
        self._out += request
        self._out_reply_bytes += reply_bound
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if len(self._out) >= CHUNK_BYTES or self._out_reply_bytes * 2 >= self.budget:
            self._flush()

    def _flush(self) -> None:
        if not self._out:
            return
        # Read replies until the unsent requests' replies fit next to the unread ones.
        while (
            self._inflight_reply_bytes > 0
            and self._inflight_reply_bytes + self._out_reply_bytes > self.budget
        ):
            self._read_replies()
        try:
            self._conn.send(self._out)
        except OSError as exc:
            self._lost(exc)
        self._inflight_reply_bytes += self._out_reply_bytes
        self._out = bytearray()
        self._out_reply_bytes = 0
        self._unsent = 0

    def _lost(self, exc: BaseException | None) -> NoReturn:
        detail = f": {exc}" if exc is not None else ""
        sent = len(self._expect) - self._unsent
        unconfirmed = sum(1 for i, e in enumerate(self._expect) if i < sent and e >= 0)
        raise PutFailed(
            f"{self._where(server=False)}: connection to beanstalkd at {self.address} "
            f"lost{detail}; "
            f"{self._acked} rows were acknowledged, {unconfirmed} sent rows are unconfirmed",
            reply="CONNECTION_LOST",
            partition=self.partition,
            row=next((e for e in self._expect if e >= 0), None),
            acknowledged=self._acked,
            unconfirmed=unconfirmed,
        ) from exc

    def _read_replies(self) -> None:
        """Read what the socket has (blocking for at least one byte) and check each reply;
        on the first error reply, read the rest still in flight and raise PutFailed."""
        self._receive()
        if self._failure is None:
            return
        self._raise_failure()

    def _raise_failure(self) -> NoReturn:
        # Stop sending; the replies to what was sent make the counts we report exact. The
        # requests still in _out were never sent: waiting for their replies would hang.
        while len(self._expect) > self._unsent:
            self._receive()
        assert self._failure is not None
        unsent = self._unsent
        self._out = bytearray()
        self._expect.clear()
        self._unsent = 0
        row, tube, line = self._failure
        err: BeanstalkdError = error_for(line)
        reply = line.decode("ascii", "replace")
        what = f"row {row}" if row is not None else "use"
        raise PutFailed(
            f"{self._where()}: {what} (tube {tube!r}): server replied {reply} "
            f"({type(err).__name__}); {self._failed_rows} rows failed, {self._acked} rows "
            f"of this partition were enqueued"
            + (f", {unsent} queued requests were not sent" if unsent else ""),
            reply=reply,
            partition=self.partition,
            row=row,
            acknowledged=self._acked,
        )

    def _receive(self) -> None:
        try:
            lines = self._conn.read_lines(262144)
        except ConnectionLost:
            self._lost(None)  # the server closed the connection
        except OSError as exc:
            self._lost(exc)
        expect = self._expect
        for line in lines:
            kind = expect.popleft()
            if kind >= 0:
                self._inflight_reply_bytes -= MAX_PUT_REPLY
                if line[:9] == b"INSERTED ":
                    self._acked += 1
                    continue
                self._failed_rows += 1
                if self._failure is None:
                    self._failure = (kind, self._tube_acked, line)
            else:
                tube = self._expect_tubes.popleft()
                self._inflight_reply_bytes -= USE_REPLY_OVERHEAD + len(tube)
                if line[:6] != b"USING " and self._failure is None:
                    self._failure = (None, tube, line)
                self._tube_acked = tube

    def finish(self) -> PutStats:
        """Send what is queued, read every outstanding reply; the stats of a clean run."""
        self._flush()
        while self._expect:
            self._read_replies()
        self.stats.rows = self._next_row
        return self.stats
