"""kill -9 of a real server process under a pipelined put/reserve/delete load (``-f 0``).

Afterwards every job whose INSERTED was received, and whose delete was not even sent, is
present with the same body; no job whose DELETED was received comes back; nothing that
was never sent appears. Run against ``cmdstalk-server`` and, as a check of the drill
itself, against the real beanstalkd.
"""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.server.durable_procs import KINDS, Conn, Proc, server


@dataclass
class Ledger:
    """What the clients know: puts sent, acknowledged puts (id -> body), deletes sent and
    acknowledged. A delete sent but not acknowledged may or may not have happened."""

    sent: set[bytes] = field(default_factory=set)
    inserted: dict[int, bytes] = field(default_factory=dict)
    delete_sent: set[int] = field(default_factory=set)
    deleted: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def producer(port: int, ledger: Ledger, tag: int, stop: threading.Event) -> None:
    with suppress(OSError, EOFError):
        c = Conn(port)
        n = 0
        while not stop.is_set():
            bodies = [b"p%d-%d\r\n\x00" % (tag, n + i) + os.urandom(n % 7) for i in range(25)]
            n += 25
            with ledger.lock:
                ledger.sent.update(bodies)
            c.sock.sendall(b"".join(b"put %d 0 60 %d\r\n%b\r\n" % (n % 3, len(b), b)
                                    for b in bodies))  # fmt: skip
            for body in bodies:
                line, _ = c.reply()
                assert line.startswith(b"INSERTED "), line
                with ledger.lock:
                    ledger.inserted[int(line.split()[1])] = body


def worker(port: int, ledger: Ledger, stop: threading.Event) -> None:
    with suppress(OSError, EOFError):
        c = Conn(port)
        while not stop.is_set():
            c.sock.sendall(b"reserve-with-timeout 0\r\n" * 10)
            got = []
            for _ in range(10):
                line, _ = c.reply()
                if line.startswith(b"RESERVED"):
                    got.append(int(line.split()[1]))
            if not got:
                continue
            with ledger.lock:
                ledger.delete_sent.update(got)
            c.sock.sendall(b"".join(b"delete %d\r\n" % jid for jid in got))
            for jid in got:
                line, _ = c.reply()
                assert line == b"DELETED", line
                with ledger.lock:
                    ledger.deleted.add(jid)


def load_then_crash(proc: Proc, ledger: Ledger, tags: range) -> None:
    """Pipelined producers and workers until enough happened, then kill -9 mid-load."""
    stop = threading.Event()
    threads = [threading.Thread(target=producer, args=(proc.port, ledger, tag, stop))
               for tag in tags]  # fmt: skip
    threads += [threading.Thread(target=worker, args=(proc.port, ledger, stop))
                for _ in range(2)]  # fmt: skip
    inserted, deleted = len(ledger.inserted), len(ledger.deleted)
    for t in threads:
        t.start()
    try:
        wait_until(
            lambda: len(ledger.inserted) >= inserted + 2000
            and len(ledger.deleted) >= deleted + 500,
            timeout=40, interval=0.01, message="load",
        )  # fmt: skip
        proc.crash()  # the clients are in the middle of pipelines
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=20)


def check(proc: Proc, ledger: Ledger) -> None:
    """After the restart: nothing acknowledged lost, nothing deleted back, nothing invented."""
    c = Conn(proc.port)
    top = len(ledger.sent)  # no job id can be higher than the number of puts sent
    c.sock.sendall(b"".join(b"peek %d\r\n" % jid for jid in range(1, top + 1)))
    present = {}
    for jid in range(1, top + 1):
        _line, body = c.reply()
        if body is not None:
            present[jid] = body
    c.close()
    kept = set(ledger.inserted) - ledger.delete_sent
    lost = [jid for jid in kept if present.get(jid) != ledger.inserted[jid]]
    assert not lost, f"{len(lost)} acknowledged jobs lost or changed, e.g. {lost[:5]}"
    back = ledger.deleted & set(present)
    assert not back, f"deleted jobs came back: {sorted(back)[:5]}"
    # Nothing invented: every job present was sent, once.
    assert set(present.values()) <= ledger.sent
    assert len(set(present.values())) == len(present)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_under_pipelined_load_loses_nothing_acknowledged(
    kind: str, tmp_path: Path
) -> None:
    ledger = Ledger()
    with server(kind, tmp_path, "-f", "0") as proc:
        load_then_crash(proc, ledger, range(0, 2))
    # Twice: the second crash hits a log that was itself recovered from a crash.
    with server(kind, tmp_path, "-f", "0") as proc:
        check(proc, ledger)
        load_then_crash(proc, ledger, range(2, 4))
    with server(kind, tmp_path, "-f", "0") as proc:
        check(proc, ledger)
