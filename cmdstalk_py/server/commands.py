"""The dispatcher: a command value in, one engine call, its reply bytes out (docs §4.2).

One small function per command, looked up by the command's type (the values of
:mod:`cmdstalk_py.server.verbs`); the engine's answers (a job, a count, an
:class:`~cmdstalk_py.server.outcome.Outcome`) become reply lines here, with the reply
words and renderers of :mod:`cmdstalk_py.server.protocol`. Counters follow §3.3: a
command is counted once its arguments parsed, before it is known whether it succeeds.

The connection runs the framed events of its input through :func:`run_turn` (a bounded
batch, one reply list); :func:`execute` runs one command line, :func:`put_body` creates a
put's job once its body has arrived, :func:`abort_wait` answers a waiting client that
half-closes, and :func:`deliveries` renders the answers of blocked reserves that the
engine produced since (a put, release, kick, TTR expiry, pause end or timeout served them).
"""

from __future__ import annotations

import time

from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.engine import Engine, Result
from cmdstalk_py.server.framing import BodySkipped, Framer, PutBody
from cmdstalk_py.server.job import Job
from cmdstalk_py.server.outcome import JOURNAL_FAILED, WAITING, Outcome
from cmdstalk_py.server.session import Session
from cmdstalk_py.server.stats import GlobalStats, job_yaml, stats_yaml, tube_yaml

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from enum import Enum
    from typing import Any

    Handler = Callable[[Engine, Session, Any, float], bytes | None]
else:
    from cmdstalk_py.server.standins import Enum

#: The reply line of each outcome.
OUTCOME_REPLIES: dict[Outcome, bytes] = {
    Outcome.NOT_FOUND: p.NOT_FOUND,
    Outcome.JOURNAL_FAILED: p.INTERNAL_ERROR,
    Outcome.DRAINING: p.DRAINING,
    Outcome.BAD_BODY: p.EXPECTED_CRLF,
    Outcome.TIMED_OUT: p.TIMED_OUT,
    Outcome.DEADLINE_SOON: p.DEADLINE_SOON,
}


#: A turn runs at most this many commands, for at most this many seconds, or until
#: FLUSH_AT reply bytes are pending. A client pipelining thousands of commands in one
#: write must not make every other client wait for all of them (beanstalkd serves one
#: command per connection per turn; a few hundred here keep the loop's overhead per
#: command small, and the time bound covers costly commands).
TURN_COMMANDS = 256
TURN_SECONDS = 0.005
FLUSH_AT = 1 << 18


class TurnEnd(Enum):
    """How :func:`run_turn` ended."""

    EXHAUSTED = "exhausted"  # every complete event ran
    STOPPED = "stopped"  # the turn's bounds ran out: the rest is for the next turn
    WAITING = "waiting"  # a reserve found no job: the connection waits, its input too
    QUIT = "quit"


_EXHAUSTED = TurnEnd.EXHAUSTED
_clock = time.monotonic
_Put = p.Put
_Quit = p.Quit
_Rejected = p.Rejected
_render_reserved = p.render_reserved


def run_turn(e: Engine, s: Session, framer: Framer) -> tuple[list[bytes], TurnEnd]:
    """Run the events ``framer`` has within one turn's bounds: the replies, and why it
    stopped (the events not run go back to the framer).

    At the end of input, a reserve that would wait times out at once. Per read, this
    loop is most of what the server does: each command goes straight to its handler in
    :data:`COMMANDS`.
    """
    out: list[bytes] = []
    out_size = 0
    budget = TURN_COMMANDS
    # Puts of one turn share one clock reading: their jobs then share one float object
    # for their creation time, which matters on pipelined fills.
    now = put_now = _clock()
    turn_ends = now + TURN_SECONDS
    handlers = COMMANDS
    events = framer.events(TURN_COMMANDS)
    for i, event in enumerate(events):
        kind = type(event)
        if kind is PutBody:
            put_event: PutBody = event  # type: ignore[assignment]
            put, data, announced = put_event
            reply = put_body(e, s, put, data, put_now, announced)
        elif kind is _Put:
            _put(e, s, event, put_now)  # type: ignore[arg-type]  # its body is on its way
            continue
        elif kind is _Quit:
            return out, TurnEnd.QUIT
        elif kind is BodySkipped:
            reply = event.rejected.reply  # type: ignore[union-attr]  # counted at its line
        else:
            # The clock is read per command, like 1.12: times in replies must not lag.
            now = _clock()
            answer = handlers[kind](e, s, event, now)
            if answer is None:
                if not framer.eof:
                    framer.unread(events[i + 1 :])
                    return out, TurnEnd.WAITING
                answer = abort_wait(e, s) or p.TIMED_OUT
            elif kind is _Rejected and event.skip:  # type: ignore[union-attr]
                continue  # answered once the announced body is thrown away
            reply = answer
        out.append(reply)
        out_size += len(reply)
        budget -= 1
        # The time bound looks at the clock read before the last command (puts, which
        # cost little, are bounded by the count): one costly command may overrun it.
        if not budget or out_size > FLUSH_AT or now > turn_ends:
            framer.unread(events[i + 1 :])
            return out, TurnEnd.STOPPED
    # A full list may have left complete events in the input: the next turn's.
    return out, (TurnEnd.STOPPED if len(events) == TURN_COMMANDS else _EXHAUSTED)


def execute(e: Engine, s: Session, cmd: p.Command, now: float) -> bytes | None:
    """Run one parsed command; the reply, or None when the connection now waits.

    A :class:`~cmdstalk_py.server.protocol.Put` only counts here and marks a producer (a
    put line whose body is still on its way); its job is created by :func:`put_body`.
    """
    return COMMANDS[type(cmd)](e, s, cmd, now)


def put_body(
    e: Engine, s: Session, cmd: p.Put, body: bytes, now: float, announced: bool = False
) -> bytes:
    """Create the job of ``cmd`` once ``body`` (size + 2 bytes) has arrived.

    ``announced``: its line was run on its own before (:func:`_put` counted it then).
    """
    if not announced:
        e.counters["put"] += 1
    r = e.put(s, cmd.pri, cmd.delay, cmd.ttr, body, now)
    if isinstance(r, Job):
        return p.render_inserted(r.id)
    # A put the journal refused is out of memory (1.12's answer when it cannot log it).
    return p.OUT_OF_MEMORY if r is JOURNAL_FAILED else OUTCOME_REPLIES[r]


def abort_wait(e: Engine, s: Session) -> bytes | None:
    """The client half-closed while waiting: TIMED_OUT (None if it was not waiting)."""
    return p.TIMED_OUT if e.waiters.abort(s) else None


def deliveries(e: Engine) -> list[tuple[Session, bytes]]:
    """The replies of blocked reserves that ended since the last call, in order."""
    return [(s, reserved(r)) for s, r in e.waiters.take()]


def reserved(r: Result) -> bytes:
    """A reserve's answer: the RESERVED job, or the outcome's reply line."""
    if isinstance(r, Job):
        return p.render_reserved(r.id, r.body)
    return OUTCOME_REPLIES[r]


def _reserve(e: Engine, s: Session, cmd: p.Reserve, now: float) -> bytes | None:
    e.counters["reserve-with-timeout" if cmd.with_timeout else "reserve"] += 1
    r = e.reserve(s, cmd.timeout, now)
    if type(r) is Job:
        return _render_reserved(r.id, r.body)
    return None if r is WAITING else OUTCOME_REPLIES[r]  # type: ignore[index]


def _reserve_job(e: Engine, s: Session, cmd: p.ReserveJob, now: float) -> bytes | None:
    return reserved(e.reserve_job(s, cmd.id, now))


def _delete(e: Engine, s: Session, cmd: p.Delete, now: float) -> bytes | None:
    e.counters["delete"] += 1
    r = e.delete(s, cmd.id)
    return p.DELETED if isinstance(r, Job) else OUTCOME_REPLIES[r]


def _release(e: Engine, s: Session, cmd: p.Release, now: float) -> bytes | None:
    e.counters["release"] += 1
    r = e.release(s, cmd.id, cmd.pri, cmd.delay, now)
    return p.RELEASED if isinstance(r, Job) else OUTCOME_REPLIES[r]


def _bury(e: Engine, s: Session, cmd: p.Bury, now: float) -> bytes | None:
    e.counters["bury"] += 1
    r = e.bury(s, cmd.id, cmd.pri)
    return p.BURIED if isinstance(r, Job) else OUTCOME_REPLIES[r]


def _touch(e: Engine, s: Session, cmd: p.Touch, now: float) -> bytes | None:
    e.counters["touch"] += 1
    r = e.touch(s, cmd.id, now)
    return p.TOUCHED if isinstance(r, Job) else OUTCOME_REPLIES[r]


def _kick(e: Engine, s: Session, cmd: p.Kick, now: float) -> bytes | None:
    e.counters["kick"] += 1
    return p.render_kicked(e.kick(s.use, cmd.bound, now))


def _kick_job(e: Engine, s: Session, cmd: p.KickJob, now: float) -> bytes | None:
    r = e.kick_job(cmd.id, now)
    return p.KICKED if isinstance(r, Job) else OUTCOME_REPLIES[r]


def _use(e: Engine, s: Session, cmd: p.Use, now: float) -> bytes | None:
    e.counters["use"] += 1
    return p.render_using(e.tubes.use(s, cmd.name).name)


def _watch(e: Engine, s: Session, cmd: p.Watch, now: float) -> bytes | None:
    e.counters["watch"] += 1
    return p.render_watching(e.tubes.watch(s, cmd.name))


def _ignore(e: Engine, s: Session, cmd: p.Ignore, now: float) -> bytes | None:
    e.counters["ignore"] += 1
    count = e.tubes.ignore(s, cmd.name)
    return p.NOT_IGNORED if count is None else p.render_watching(count)


def _pause_tube(e: Engine, s: Session, cmd: p.PauseTube, now: float) -> bytes | None:
    e.counters["pause-tube"] += 1
    r = e.pause_tube(cmd.name, cmd.delay, now)
    return OUTCOME_REPLIES[r] if isinstance(r, Outcome) else p.PAUSED


def _found(job: Job | None) -> bytes:
    return p.NOT_FOUND if job is None else p.render_found(job.id, job.body)


def _peek(e: Engine, s: Session, cmd: p.Peek, now: float) -> bytes | None:
    e.counters["peek"] += 1
    return _found(e.jobs.get(cmd.id))


def _peek_ready(e: Engine, s: Session, cmd: p.PeekReady, now: float) -> bytes | None:
    e.counters["peek-ready"] += 1
    return _found(s.use.ready.peek())


def _peek_delayed(e: Engine, s: Session, cmd: p.PeekDelayed, now: float) -> bytes | None:
    e.counters["peek-delayed"] += 1
    return _found(s.use.delayed.peek())


def _peek_buried(e: Engine, s: Session, cmd: p.PeekBuried, now: float) -> bytes | None:
    e.counters["peek-buried"] += 1
    return _found(next(iter(s.use.buried), None))


def _stats_job(e: Engine, s: Session, cmd: p.StatsJob, now: float) -> bytes | None:
    e.counters["stats-job"] += 1
    job = e.jobs.get(cmd.id)
    if job is None:
        return p.NOT_FOUND
    return p.render_ok(job_yaml(job, now, e.journal.file_of(job)))


def _stats_tube(e: Engine, s: Session, cmd: p.StatsTube, now: float) -> bytes | None:
    e.counters["stats-tube"] += 1
    t = e.tubes.get(cmd.name)
    if t is None:
        return p.NOT_FOUND
    return p.render_ok(tube_yaml(t, now))


def _stats(e: Engine, s: Session, cmd: p.Stats, now: float) -> bytes | None:
    e.counters["stats"] += 1
    tubes = e.tubes
    g = GlobalStats(
        urgent=sum(t.urgent for t in tubes),
        ready=sum(len(t.ready) for t in tubes),
        reserved=sum(t.reserved for t in tubes),
        delayed=sum(len(t.delayed) for t in tubes),
        buried=sum(len(t.buried) for t in tubes),
        counters=e.counters,
        job_timeouts=e.job_timeouts,
        total_jobs=e.total_jobs,
        max_job_size=e.max_job_size,
        tubes=len(tubes),
        connections=e.connections,
        producers=e.producers,
        workers=e.workers,
        waiting=e.waiters.count,
        total_connections=e.total_connections,
        uptime=now - e.started,
        binlog=e.journal.stats(),
        draining=e.draining,
    )
    return p.render_ok(stats_yaml(g, e.info, e.cpu()))


def _list_tubes(e: Engine, s: Session, cmd: p.ListTubes, now: float) -> bytes | None:
    e.counters["list-tubes"] += 1
    return p.render_ok(p.render_yaml_list([t.name for t in e.tubes]))


def _list_tube_used(e: Engine, s: Session, cmd: p.ListTubeUsed, now: float) -> bytes | None:
    e.counters["list-tube-used"] += 1
    return p.render_using(s.use.name)


def _list_tubes_watched(
    e: Engine, s: Session, cmd: p.ListTubesWatched, now: float
) -> bytes | None:
    e.counters["list-tubes-watched"] += 1
    return p.render_ok(p.render_yaml_list([t.name for t in s.watch]))


def _quit(e: Engine, s: Session, cmd: p.Quit, now: float) -> bytes | None:
    return b""


def _rejected(e: Engine, s: Session, cmd: p.Rejected, now: float) -> bytes | None:
    if cmd.counter is not None:
        e.counters[cmd.counter] += 1
    return cmd.reply


def _put(e: Engine, s: Session, cmd: p.Put, now: float) -> bytes | None:
    # A put line whose body has not arrived: counted, a producer and its job's id now,
    # like 1.12.
    e.counters["put"] += 1
    e.begin_put(s, now)
    return None


COMMANDS: dict[type, Handler] = {
    p.Put: _put,
    p.Reserve: _reserve,
    p.ReserveJob: _reserve_job,
    p.Delete: _delete,
    p.Release: _release,
    p.Bury: _bury,
    p.Touch: _touch,
    p.Use: _use,
    p.Watch: _watch,
    p.Ignore: _ignore,
    p.Peek: _peek,
    p.PeekReady: _peek_ready,
    p.PeekDelayed: _peek_delayed,
    p.PeekBuried: _peek_buried,
    p.Kick: _kick,
    p.KickJob: _kick_job,
    p.StatsJob: _stats_job,
    p.StatsTube: _stats_tube,
    p.Stats: _stats,
    p.ListTubes: _list_tubes,
    p.ListTubeUsed: _list_tube_used,
    p.ListTubesWatched: _list_tubes_watched,
    p.PauseTube: _pause_tube,
    p.Quit: _quit,
    p.Rejected: _rejected,
}
