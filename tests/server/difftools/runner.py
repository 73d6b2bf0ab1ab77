"""Running a scenario against one server, and against a pair in parallel."""

from __future__ import annotations

import fnmatch
import re
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field

from tests.server.difftools import steps as st
from tests.server.difftools import wire
from tests.server.difftools.normalise import (
    TOLERANT,
    IdBook,
    normalise_yaml,
    render,
    same,
    same_transcripts,
    side_by_side,
)
from tests.server.difftools.servers import Target, other_kind, server_pair

# Both sides must answer a counter-free command this way on a fresh connection.
HANDSHAKE = (b"kick-job 0\r\n", b"NOT_FOUND")
_TEMPLATE = re.compile(rb"\{j(\d+)\}")
_POLL_INTERVAL = 0.005


@dataclass
class Result:
    """What one server did in one scenario."""

    kind: str
    transcript: list[tuple[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unchecked: int = 0  # silence windows skipped because the machine was too slow


class Run:
    """Executes a scenario's steps on one server, recording normalised replies."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.result = Result(target.kind)
        self.ids = IdBook()
        self.hidden: Counter[str] = Counter()
        self.conns: dict[int, wire.Conn] = {}
        self.closed: set[int] = set()
        self.mark = time.monotonic()
        self.sync = self._open()

    def _open(self) -> wire.Conn:
        c = wire.Conn(self.target.host, self.target.port)
        c.send(HANDSHAKE[0])
        ev = c.read(10)
        if not (isinstance(ev, wire.Reply) and ev.line == HANDSHAKE[1]):
            raise AssertionError(f"{self.target.kind}: handshake answered {ev!r}")
        return c

    def conn(self, n: int) -> wire.Conn:
        if n in self.closed:
            raise AssertionError(f"scenario bug: connection {n} used after close")
        if n not in self.conns:
            self.conns[n] = self._open()
        return self.conns[n]

    def fail(self, what: str) -> None:
        self.result.failures.append(what)

    def record(self, conn: int, ev: wire.Event) -> str:
        text = render(ev, self.ids, self.hidden)
        self.result.transcript.append((str(conn), text))
        return text

    # -- steps ---------------------------------------------------------------------

    def run(self, scenario: st.Scenario) -> Result:
        start = time.monotonic()
        try:
            for i, step in enumerate(scenario.steps):
                self.step(i, step)
        finally:
            self.result.seconds = time.monotonic() - start
            for c in [*self.conns.values(), self.sync]:
                with suppress(OSError):
                    c.close()
        return self.result

    def step(self, i: int, step: object) -> None:
        if isinstance(step, st.Send):
            self.conn(step.conn).send(self.substitute(step.data))
        elif isinstance(step, st.Recv):
            self.recv(i, step)
        elif isinstance(step, st.Mark):
            self.mark = time.monotonic()
        elif isinstance(step, st.Silent):
            window = step.window
            if step.since_mark:
                window = self.mark + step.window - time.monotonic()
                if window <= 0:
                    self.result.unchecked += 1
                    self.result.transcript.append((str(step.conn), "<silent>"))
                    return
            ev = self.conn(step.conn).read(window)
            if isinstance(ev, wire.Timeout) and not ev.partial:
                self.result.transcript.append((str(step.conn), "<silent>"))
            else:
                got = self.record(step.conn, ev)
                self.fail(f"step {i}: expected silence on {step.conn}, got {got}")
        elif isinstance(step, st.Eof):
            ev = self.conn(step.conn).read(step.within)
            text = self.record(step.conn, ev)
            if not isinstance(ev, wire.Eof):
                self.fail(f"step {i}: expected the server to close {step.conn}, got {text}")
            self.forget(step.conn)
        elif isinstance(step, st.Close):
            self.conn(step.conn).close()
            self.forget(step.conn)
        elif isinstance(step, st.HalfClose):
            self.conn(step.conn).half_close()
        elif isinstance(step, st.Poll):
            self.poll(i, step)
        elif isinstance(step, st.Drain):
            if self.target.drain is None:
                self.fail(f"step {i}: {self.target.kind} offers no way to enter drain mode")
                return
            self.target.drain()
            self.poll(i, st.await_stats(draining="true"))
        else:
            raise TypeError(f"unknown step {step!r}")

    def forget(self, n: int) -> None:
        """Drop a closed connection and wait until the server has noticed it."""
        self.conns.pop(n).close()
        self.closed.add(n)
        self.poll(-1, st.await_stats(current_connections=len(self.conns) + 1))

    def substitute(self, data: bytes) -> bytes:
        def one(m: re.Match[bytes]) -> bytes:
            raw = self.ids.raw(int(m.group(1)))
            if raw is None:
                self.fail(f"{{j{m.group(1).decode()}}} used before that job id appeared")
                return b"999999"
            return str(raw).encode()

        return _TEMPLATE.sub(one, data)

    def recv(self, i: int, step: st.Recv) -> None:
        deadline = time.monotonic() + step.within
        for k, want in enumerate(step.wants):
            ev = self.conn(step.conn).read(max(0.0, deadline - time.monotonic()))
            text = self.record(step.conn, ev)
            problem = self.check(ev, want)
            if problem:
                self.fail(f"step {i} reply {k} on conn {step.conn}: {problem}; got {text!r}")
            if not isinstance(ev, wire.Reply):
                return

    def check(self, ev: wire.Event, want: st.Want) -> str | None:
        if not isinstance(ev, wire.Reply):
            return f"wanted {want!r}"
        if want is None:
            return None
        line = render(wire.Reply(ev.line), self.ids, self.hidden)
        if isinstance(want, str):
            return None if fnmatch.fnmatchcase(line, want) else f"wanted {want!r}"
        if isinstance(want, tuple):
            ok = fnmatch.fnmatchcase(line, want[0]) and ev.data == want[1]
            return None if ok else f"wanted {want!r}"
        if ev.data is None or not ev.line.startswith(b"OK "):
            return f"wanted an OK reply with {want!r}"
        _, doc = normalise_yaml(ev.data, self.ids, self.hidden)
        if isinstance(want, frozenset):
            return None if isinstance(doc, list) and set(doc) == want else f"wanted {want!r}"
        if not isinstance(doc, dict):
            return f"wanted a mapping with {want!r}"
        bad = {k: doc.get(k) for k, v in want.items() if not same(str(doc.get(k)), _tol(k, v))}
        return f"wanted {dict(want)!r}, differing: {bad!r}" if bad else None

    def poll(self, i: int, step: st.Poll) -> None:
        conn = self.sync if step.conn is None else self.conn(step.conn)
        key = "cmd-" + step.command.split(b" ")[0].strip().decode()
        deadline = time.monotonic() + step.timeout
        last: object = None
        command = self.substitute(step.command)
        while time.monotonic() < deadline:
            conn.send(command)
            self.hidden[key] += 1
            ev = conn.read(max(0.1, deadline - time.monotonic()))
            if not isinstance(ev, wire.Reply) or ev.data is None:
                last = ev
                break
            doc = wire.parse_yaml(ev.data)
            last = doc
            if isinstance(doc, dict) and _matches(doc, step.until):
                return
            time.sleep(_POLL_INTERVAL)
        where = "sync" if step.conn is None else str(step.conn)
        text = f"<poll {step.command!r} on {where} never saw {dict(step.until)}>"
        self.result.transcript.append((where, text))
        self.fail(f"step {i}: {text}; last {last!r}")


def _tol(key: str, value: str | int) -> str:
    """A literal want for a time field means "within one second" too."""
    text = str(value)
    return f"~{text}" if key in TOLERANT and not text.startswith("~") else text


def _matches(doc: Mapping[str, str], until: Mapping[str, str]) -> bool:
    return all(doc.get(k) == v for k, v in until.items())


@dataclass
class PairResult:
    scenario: st.Scenario
    real: Result
    other: Result

    @property
    def identical(self) -> bool:
        return same_transcripts(self.real.transcript, self.other.transcript)

    def problems(self) -> list[str]:
        out = [f"{r.kind}: {f}" for r in (self.real, self.other) for f in r.failures]
        if not self.identical:
            out.append("transcripts differ")
        return out

    def report(self) -> str:
        head = f"scenario {self.scenario.name}:\n  " + "\n  ".join(
            p[:300] for p in self.problems()
        )
        other = self.other.kind + ("#2" if self.other.kind == self.real.kind else "")
        table = side_by_side(self.real.transcript, self.other.transcript, "beanstalkd", other)
        return f"{head}\n{table}"


def run_one(target: Target, scenario: st.Scenario) -> Result:
    return Run(target).run(scenario)


def run_pair(scenario: st.Scenario, pool: ThreadPoolExecutor | None = None) -> PairResult:
    """Run ``scenario`` on a fresh real beanstalkd and a fresh other server, in parallel."""
    with server_pair(scenario.max_job_size) as (real, other):
        if pool is None:
            with ThreadPoolExecutor(2) as own:
                fa, fb = own.submit(run_one, real, scenario), own.submit(run_one, other, scenario)
                return PairResult(scenario, fa.result(), fb.result())
        fa, fb = pool.submit(run_one, real, scenario), pool.submit(run_one, other, scenario)
        return PairResult(scenario, fa.result(), fb.result())


__all__ = ["PairResult", "Result", "Run", "other_kind", "run_one", "run_pair"]
