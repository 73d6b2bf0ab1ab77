"""Running generated traffic: command units on two servers, raw streams on one."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field

from tests.server.difftools import wire
from tests.server.difftools.grammar import LAST_ID, RESYNC_FILLER, Stream, Unit
from tests.server.difftools.normalise import IdBook, render
from tests.server.difftools.runner import HANDSHAKE
from tests.server.difftools.servers import Target

# A reply to a command that cannot block arrives within milliseconds; past this we ask
# the server (hidden stats) whether the connection is parked in a reserve.
FIRST_LOOK = 0.1
PATIENCE = 60.0


def _open(target: Target) -> wire.Conn:
    c = wire.Conn(target.host, target.port)
    c.send(HANDSHAKE[0])
    ev = c.read(10)
    if not (isinstance(ev, wire.Reply) and ev.line == HANDSHAKE[1]):
        raise AssertionError(f"{target.kind}: handshake answered {ev!r}")
    return c


def stats_of(conn: wire.Conn) -> dict[str, str]:
    conn.send(b"stats\r\n")
    ev = conn.read(PATIENCE)
    if not isinstance(ev, wire.Reply) or ev.data is None:
        raise AssertionError(f"stats answered {ev!r}")
    doc = wire.parse_yaml(ev.data)
    assert isinstance(doc, dict)
    return doc


@dataclass
class UnitRun:
    """Plays a list of units on one server and records the normalised replies."""

    target: Target
    transcript: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ids = IdBook()
        self.hidden: Counter[str] = Counter()
        self.sync = _open(self.target)
        self.conns: dict[int, wire.Conn] = {}
        self.blocked: set[int] = set()

    def record(self, conn: int, ev: wire.Event) -> None:
        if isinstance(ev, wire.Malformed):
            self.problems.append(f"conn {conn}: malformed reply {ev!r}")
        self.transcript.append((str(conn), render(ev, self.ids, self.hidden)))

    def hidden_stats(self) -> dict[str, str]:
        self.hidden["cmd-stats"] += 1
        return stats_of(self.sync)

    def waiting_is(self, n: int) -> bool:
        return self.hidden_stats()["current-waiting"] == str(n)

    def play(self, units: list[Unit]) -> UnitRun:
        try:
            for u in units:
                if u.conn not in self.blocked:
                    self.play_one(u)
            # Parked connections first: closing any other one may release jobs that
            # a parked reserve would then receive, which is a race we must not create.
            for n in sorted(list(self.conns), key=lambda n: (n not in self.blocked, n)):
                self.finish(n)
        finally:
            for c in [*self.conns.values(), self.sync]:
                with suppress(OSError):
                    c.close()
        return self

    def play_one(self, u: Unit) -> None:
        if u.conn not in self.conns:
            self.conns[u.conn] = _open(self.target)
        conn = self.conns[u.conn]
        last = str(self.ids.last if self.ids.last is not None else 999).encode()
        # Counted now, not inferred from ``blocked``: a put since may have handed a job
        # to a parked reserve, which then no longer waits (it stays in ``blocked``).
        waiting = int(self.hidden_stats()["current-waiting"]) if u.may_block else 0
        if waiting:
            # One blocked reserve at a time: with two, 1.12 hands jobs out in the order of
            # its rotating index (four waiters get them 1, 2, 4, 3), where ours is the plain
            # FIFO the protocol reference (§6) asks of a clone: a difference on purpose,
            # not compared. Both servers count the same waiters, or the transcripts differ.
            self.transcript.append((str(u.conn), "<not sent: a reserve already waits>"))
            return
        puts = int(self.hidden_stats()["cmd-put"]) if u.opens_body else 0
        conn.send(u.data.replace(LAST_ID.encode(), last))
        if u.opens_body:
            self.await_put_line(puts + 1)
        if u.hangs_up:
            self.drop(u.conn)
            return
        for _ in range(u.replies):
            ev = conn.read(FIRST_LOOK)
            if isinstance(ev, wire.Timeout) and u.may_block and self.waiting_is(waiting + 1):
                self.blocked.add(u.conn)
                self.transcript.append((str(u.conn), "<waiting>"))
                return
            if isinstance(ev, wire.Timeout):
                ev = conn.read(PATIENCE)
            self.record(u.conn, ev)
            if not isinstance(ev, wire.Reply):
                self.problems.append(f"conn {u.conn}: {ev!r} instead of a reply to {u.data!r}")
                return
        if u.closes:
            self.record(u.conn, conn.read(PATIENCE))
            self.drop(u.conn)

    def await_put_line(self, count: int) -> None:
        """Wait until the server has read a put line (``cmd-put`` counts it there)."""
        deadline = time.monotonic() + PATIENCE
        while int(self.hidden_stats()["cmd-put"]) < count:
            if time.monotonic() > deadline:
                self.problems.append(f"server never read the put line that makes {count}")
                return
            time.sleep(0.005)

    def drop(self, n: int) -> None:
        """Forget a connection the server closed, once the server has let it go too."""
        self.conns.pop(n).close()
        self.blocked.discard(n)
        deadline = time.monotonic() + PATIENCE
        while self.hidden_stats()["current-connections"] != str(len(self.conns) + 1):
            if time.monotonic() > deadline:
                self.problems.append(f"server never dropped connection {n}")
                return
            time.sleep(0.005)

    def finish(self, n: int) -> None:
        """Half-close: a waiting reserve answers TIMED_OUT (or got a job); then EOF."""
        conn = self.conns[n]
        conn.half_close()
        for ev in conn.read_until_eof(PATIENCE):
            self.record(n, ev)
        self.drop(n)


@dataclass
class StreamOutcome:
    replies: list[wire.Event]
    resynced: bool
    ending: str  # "resync", "eof", "waiting", "swallowing"


def play_stream(target: Target, observer: wire.Conn, stream: Stream, tag: int,
                split_writes: bool) -> StreamOutcome:
    """Send ``stream`` then a resync on a fresh connection; classify how it ended.

    ``observer`` is a separate, idle connection used to ask for ``stats``.
    """
    conn = _open(target)
    try:
        if split_writes:
            for chunk in stream.chunks:
                conn.send(chunk)
        else:
            conn.send(stream.data)
        marker = b"USING resync-%d" % tag
        conn.send(b"z" * RESYNC_FILLER + b"\r\n\r\n" + marker[6:].join([b"use ", b"\r\n"]))
        replies: list[wire.Event] = []
        # A stream that announced a huge body may leave the server swallowing bytes for
        # good; then there is nothing to wait for beyond the replies already due.
        deadline = time.monotonic() + (0.3 if stream.huge else PATIENCE)
        while time.monotonic() < deadline:
            ev = conn.read(min(0.1, max(0.0, deadline - time.monotonic())))
            if isinstance(ev, wire.Timeout):
                if stats_of(observer)["current-waiting"] != "0":
                    conn.half_close()
                    replies.extend(conn.read_until_eof(PATIENCE))
                    return StreamOutcome(replies, False, "waiting")
                continue
            replies.append(ev)
            if isinstance(ev, wire.Reply) and ev.line == marker:
                return StreamOutcome(replies, True, "resync")
            if not isinstance(ev, wire.Reply):
                return StreamOutcome(replies, False, "eof" if isinstance(ev, wire.Eof) else "bad")
        return StreamOutcome(replies, False, "swallowing")
    finally:
        conn.close()


def stream_transcript(target: Target, stream: Stream) -> list[tuple[str, str]]:
    """Everything the server answers to ``stream`` (one write) followed by a half-close.

    The half-close makes the end deterministic: a parked reserve answers TIMED_OUT, a
    body that will never be complete is abandoned, and the server closes.
    """
    conn = _open(target)
    try:
        conn.send(stream.data)
        conn.half_close()
        ids, hidden = IdBook(), Counter[str]()
        return [("0", render(ev, ids, hidden)) for ev in conn.read_until_eof(PATIENCE)]
    finally:
        conn.close()
