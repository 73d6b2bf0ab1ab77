"""What each command does to the engine, and the reply it gets (docs §4.2).

One function per command, looked up by the command's type. Counters follow §3.3: a
command is counted once its arguments parsed, before it is known whether it succeeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.job import BURIED, DELAYED, READY, RESERVED
from cmdstalk_py.server.journal import JournalError
from cmdstalk_py.server.session import Session
from cmdstalk_py.server.stats import GlobalStats, job_yaml, stats_yaml, tube_yaml

if TYPE_CHECKING:
    from cmdstalk_py.server.engine import Engine

Handler = Callable[["Engine", Session, Any, float], "bytes | None"]


def _reserve(e: Engine, s: Session, cmd: p.Reserve, now: float) -> bytes | None:
    e.counters["reserve-with-timeout" if cmd.with_timeout else "reserve"] += 1
    if not s.worker:
        s.worker = True
        e.workers += 1
    # Inside the safety margin: DEADLINE_SOON unless some watched tube has a ready job
    # (1.12 does not look at pauses here). The cheap test comes first.
    t = e._best_ready_tube(s)
    if s.reserved and t is None and not any(w.ready for w in s.watch):
        soonest = min(j.deadline for j in s.reserved)
        if now >= soonest - 1.0:
            return p.DEADLINE_SOON
    if t is not None:
        job = e._pop_ready(t)
        if e._reserve(s, job, now):
            return p.render_reserved(job.id, job.body)
        e._push_ready(job)
        return p.INTERNAL_ERROR
    if cmd.timeout == 0:
        return p.TIMED_OUT
    e._start_wait(s, cmd.timeout, now)
    return None


def _reserve_job(e: Engine, s: Session, cmd: p.ReserveJob, now: float) -> bytes | None:
    job = e.jobs.get(cmd.id)
    if job is None or job.state is RESERVED:
        return p.NOT_FOUND
    old_state = job.state
    e._unlink(job)
    if not e._reserve(s, job, now):
        _relink(e, job, old_state)
        return p.INTERNAL_ERROR
    if not s.worker:
        s.worker = True
        e.workers += 1
    return p.render_reserved(job.id, job.body)


def _relink(e: Engine, job: Any, state: Any) -> None:
    # Undo _unlink after a refused journal write.
    if state is READY:
        e._push_ready(job)
    elif state is DELAYED:
        e._to_delayed(job)
    else:
        job.state = BURIED
        job.tube.buried[job] = None


def _delete(e: Engine, s: Session, cmd: p.Delete, now: float) -> bytes | None:
    e.counters["delete"] += 1
    job = e.jobs.get(cmd.id)
    if job is None or (job.state is RESERVED and job.reserver is not s):
        return p.NOT_FOUND
    try:
        e.journal.job_deleted(job)
    except JournalError:
        return p.INTERNAL_ERROR
    e._unlink(job)
    job.tube.cmd_delete += 1
    e._forget(job)
    return p.DELETED


def _owned(e: Engine, s: Session, job_id: int) -> Any:
    job = e.jobs.get(job_id)
    if job is None or job.state is not RESERVED or job.reserver is not s:
        return None
    return job


def _release(e: Engine, s: Session, cmd: p.Release, now: float) -> bytes | None:
    e.counters["release"] += 1
    job = _owned(e, s, cmd.id)
    if job is None:
        return p.NOT_FOUND
    saved = (job.pri, job.delay, job.deadline)
    job.pri = cmd.pri
    job.delay = cmd.delay
    job.releases += 1
    if cmd.delay:
        job.state = DELAYED
        job.deadline = now + cmd.delay
    else:
        job.state = READY
    try:
        e.journal.job_changed(job)
    except JournalError:
        job.pri, job.delay, job.deadline = saved
        job.releases -= 1
        job.state = RESERVED
        return p.INTERNAL_ERROR
    # RESERVED -> DELAYED (delay > 0) or READY.
    e._unreserve(job)
    e._stale += 1
    if cmd.delay:
        e._to_delayed(job)
    else:
        e._make_ready(job, now)
    return p.RELEASED


def _bury(e: Engine, s: Session, cmd: p.Bury, now: float) -> bytes | None:
    e.counters["bury"] += 1
    job = _owned(e, s, cmd.id)
    if job is None:
        return p.NOT_FOUND
    old_pri = job.pri
    job.pri = cmd.pri
    job.buries += 1
    job.state = BURIED
    try:
        e.journal.job_changed(job)
    except JournalError:
        job.pri = old_pri
        job.buries -= 1
        job.state = RESERVED
        return p.INTERNAL_ERROR
    # RESERVED -> BURIED, at the end of the tube's buried FIFO.
    e._unreserve(job)
    e._stale += 1
    job.tube.buried[job] = None
    return p.BURIED


def _touch(e: Engine, s: Session, cmd: p.Touch, now: float) -> bytes | None:
    e.counters["touch"] += 1
    job = _owned(e, s, cmd.id)
    if job is None:
        return p.NOT_FOUND
    # Nothing persisted changes: a reserved job is logged as ready, without its deadline.
    job.deadline = now + job.ttr
    e.arm_ttr(job)
    return p.TOUCHED


def _use(e: Engine, s: Session, cmd: p.Use, now: float) -> bytes | None:
    e.counters["use"] += 1
    t = e.tube(cmd.name)
    old = s.use
    if t is not old:
        t.using += 1
        s.use = t
        old.using -= 1
        e._maybe_drop(old)
    return p.render_using(t.name)


def _watch(e: Engine, s: Session, cmd: p.Watch, now: float) -> bytes | None:
    e.counters["watch"] += 1
    t = e.tube(cmd.name)
    if t not in s.watch:
        s.watch.append(t)
        t.watching += 1
    return p.render_watching(len(s.watch))


def _ignore(e: Engine, s: Session, cmd: p.Ignore, now: float) -> bytes | None:
    e.counters["ignore"] += 1
    t = e.tubes.get(cmd.name)
    watch = s.watch
    if t is None or t not in watch:
        return p.render_watching(len(watch))
    if len(watch) == 1:
        return p.NOT_IGNORED
    # 1.12 removes from the watch array by moving the last one into the hole.
    i = watch.index(t)
    last = watch.pop()
    if i < len(watch):
        watch[i] = last
    t.watching -= 1
    e._maybe_drop(t)
    return p.render_watching(len(watch))


def _found(job: Any) -> bytes:
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


def _kick_one(e: Engine, job: Any, now: float) -> bool:
    # BURIED/DELAYED (already unlinked) -> READY. False: the journal refused.
    old_state = job.state
    job.kicks += 1
    job.state = READY
    try:
        e.journal.job_changed(job)
    except JournalError:
        job.kicks -= 1
        _relink(e, job, old_state)
        return False
    e._make_ready(job, now)
    return True


def _kick(e: Engine, s: Session, cmd: p.Kick, now: float) -> bytes | None:
    e.counters["kick"] += 1
    t = s.use
    count = 0
    # Buried jobs first (oldest first); only when there are none, delayed ones.
    if t.buried:
        while count < cmd.bound and t.buried:
            job = next(iter(t.buried))
            del t.buried[job]
            if not _kick_one(e, job, now):
                break
            count += 1
    else:
        while count < cmd.bound and t.delayed:
            job = t.delayed.pop()
            e._stale += 1
            if not _kick_one(e, job, now):
                break
            count += 1
    return p.render_kicked(count)


def _kick_job(e: Engine, s: Session, cmd: p.KickJob, now: float) -> bytes | None:
    job = e.jobs.get(cmd.id)
    if job is None or job.state is READY or job.state is RESERVED:
        return p.NOT_FOUND
    e._unlink(job)
    return p.KICKED if _kick_one(e, job, now) else p.INTERNAL_ERROR


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
    tubes = e.tube_list
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
        waiting=e.waiting,
        total_connections=e.total_connections,
        uptime=now - e.started,
        binlog=e.journal.stats(),
        draining=e.draining,
    )
    return p.render_ok(stats_yaml(g, e.info, e.cpu()))


def _list_tubes(e: Engine, s: Session, cmd: p.ListTubes, now: float) -> bytes | None:
    e.counters["list-tubes"] += 1
    return p.render_ok(p.render_yaml_list([t.name for t in e.tube_list]))


def _list_tube_used(e: Engine, s: Session, cmd: p.ListTubeUsed, now: float) -> bytes | None:
    e.counters["list-tube-used"] += 1
    return p.render_using(s.use.name)


def _list_tubes_watched(
    e: Engine, s: Session, cmd: p.ListTubesWatched, now: float
) -> bytes | None:
    e.counters["list-tubes-watched"] += 1
    return p.render_ok(p.render_yaml_list([t.name for t in s.watch]))


def _pause_tube(e: Engine, s: Session, cmd: p.PauseTube, now: float) -> bytes | None:
    e.counters["pause-tube"] += 1
    t = e.tubes.get(cmd.name)
    if t is None:
        return p.NOT_FOUND
    t.cmd_pause += 1
    t.paused = True
    t.pause = cmd.delay
    # A zero pause lasts until the next tick (1.12: 1 ns), so it ends at once.
    t.unpause_at = now + cmd.delay
    e.arm_pause(t)
    return p.PAUSED


def _quit(e: Engine, s: Session, cmd: p.Quit, now: float) -> bytes | None:
    return b""


def _rejected(e: Engine, s: Session, cmd: p.Rejected, now: float) -> bytes | None:
    if cmd.counter is not None:
        e.counters[cmd.counter] += 1
    return cmd.reply


def _put(e: Engine, s: Session, cmd: p.Put, now: float) -> bytes | None:
    e.begin_put(s)
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
