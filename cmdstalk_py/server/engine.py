"""The queue engine: jobs, tubes, reservations and timers, driven by the caller's clock.

Every method takes ``now`` (seconds, any monotonic clock); nothing here reads a clock or
sleeps. :meth:`Engine.tick` performs what is due (delayed jobs becoming ready, TTR expiry,
pause ends, reserve timeouts and DEADLINE_SOON) and returns when it next needs to run.
Replies to connections blocked in a reserve are queued in :attr:`Engine.deliveries`.
All timers share one heap of ``(when, seq, kind, object)`` alarms; an alarm whose object
has moved on since it was set is stale and skipped when it comes up.
"""

from __future__ import annotations

import contextlib
from heapq import heappop, heappush
from typing import Any

from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.commands import COMMANDS
from cmdstalk_py.server.job import BURIED, DELAYED, DELETED, READY, RESERVED, Job
from cmdstalk_py.server.journal import Journal, JournalError, NullJournal
from cmdstalk_py.server.session import Session
from cmdstalk_py.server.stats import CMD_COUNTERS, ServerInfo, rusage
from cmdstalk_py.server.tube import Tube

#: Reserve answers DEADLINE_SOON within this many seconds of a reservation's deadline.
SAFETY_MARGIN = 1.0

_DELAY = 0
_TTR = 1
_PAUSE = 2
_WAIT = 3

Alarm = tuple[float, int, int, Any]


class Engine:
    """All queue state of one server."""

    def __init__(
        self,
        now: float = 0.0,
        max_job_size: int = p.DEFAULT_MAX_JOB_SIZE,
        journal: Journal | None = None,
        info: ServerInfo | None = None,
        cpu: Any = rusage,
    ) -> None:
        self.max_job_size = max_job_size
        self.journal: Journal = journal if journal is not None else NullJournal()
        self.info = info if info is not None else ServerInfo()
        self.cpu = cpu
        self.started = now
        self.jobs: dict[int, Job] = {}
        self.tubes: dict[bytes, Tube] = {}
        self.tube_list: list[Tube] = []
        self.default = self.tube(b"default")
        self.default.permanent = True
        self.next_id = 1
        self.draining = False
        self.counters: dict[str, int] = dict.fromkeys(CMD_COUNTERS, 0)
        self.job_timeouts = 0
        self.total_jobs = 0
        self.connections = 0
        self.total_connections = 0
        self.producers = 0
        self.workers = 0
        self.waiting = 0
        self.alarms: list[Alarm] = []
        self._seq = 0
        self._stale = 0
        #: (session, reply) for connections whose blocked reserve just got its answer.
        self.deliveries: list[tuple[Session, bytes]] = []

    # ---------------------------------------------------------------- connections

    def connect(self, owner: object = None) -> Session:
        """A new connection: uses and watches ``default``."""
        self.connections += 1
        self.total_connections += 1
        session = Session(self.default, owner)
        self.default.using += 1
        self.default.watching += 1
        return session

    def disconnect(self, session: Session, now: float) -> None:
        """Close: drop a pending reserve, give its reserved jobs back at once, unref tubes."""
        if session.closed:
            return
        session.closed = True
        if session.waiting:
            self._end_wait(session)
        touched: dict[Tube, None] = {}
        for job in list(session.reserved):
            self._unreserve(job)
            self._stale += 1
            self._push_ready(job)
            touched[job.tube] = None
            self._journal_quietly(job)
        if touched:
            self._process_queue(list(touched), now)
        use = session.use
        use.using -= 1
        self._maybe_drop(use)
        for t in session.watch:
            t.watching -= 1
            self._maybe_drop(t)
        if session.producer:
            self.producers -= 1
        if session.worker:
            self.workers -= 1
        self.connections -= 1

    def take_deliveries(self) -> list[tuple[Session, bytes]]:
        """Replies for blocked connections produced since the last call."""
        out = self.deliveries
        self.deliveries = []
        return out

    def execute(self, session: Session, cmd: p.Command, now: float) -> bytes | None:
        """Run one parsed command; the reply, or None when the connection now waits.

        A :class:`~cmdstalk_py.server.protocol.Put` only counts here and marks a
        producer; its job is created by :meth:`put` once the body has arrived.
        """
        return COMMANDS[type(cmd)](self, session, cmd, now)

    def abort_wait(self, session: Session) -> bytes | None:
        """The client half-closed while waiting: TIMED_OUT (None if it was not waiting)."""
        if not session.waiting:
            return None
        self._end_wait(session)
        return p.TIMED_OUT

    # ---------------------------------------------------------------- tubes

    def tube(self, name: bytes) -> Tube:
        """The tube called ``name``, created if needed."""
        t = self.tubes.get(name)
        if t is None:
            t = Tube(name, len(self.tube_list), self.jobs)
            self.tubes[name] = t
            self.tube_list.append(t)
        return t

    def _maybe_drop(self, t: Tube) -> None:
        if t.referenced() or self.tubes.get(t.name) is not t:
            return
        del self.tubes[t.name]
        # 1.12 removes from its tube array by moving the last one into the hole.
        last = self.tube_list.pop()
        if last is not t:
            self.tube_list[t.index] = last
            last.index = t.index
        t.paused = False

    # ---------------------------------------------------------------- transitions

    def _push_ready(self, job: Job) -> None:
        # (anything) -> READY, without serving waiters.
        job.state = READY
        t = job.tube
        t.ready.push(job)
        if job.pri < p.URGENT_THRESHOLD:
            t.urgent += 1

    def _make_ready(self, job: Job, now: float) -> None:
        # (anything) -> READY, handed straight to the first waiter if there is one. A tube
        # with waiters and no pause has no ready job, so this job is the best one there.
        t = job.tube
        waiting = t.waiting
        if waiting and not t.paused:
            s = next(iter(waiting))
            self._end_wait(s)
            job.state = READY
            if self._reserve(s, job, now):
                self.deliveries.append((s, p.render_reserved(job.id, job.body)))
                return
            self.deliveries.append((s, p.INTERNAL_ERROR))
        self._push_ready(job)

    def _pop_ready(self, t: Tube) -> Job:
        job = t.ready.pop()
        if job.pri < p.URGENT_THRESHOLD:
            t.urgent -= 1
        return job

    def _to_delayed(self, job: Job) -> None:
        # (new | RESERVED) -> DELAYED until job.deadline.
        job.state = DELAYED
        job.tube.delayed.push((job.deadline, job.id), job)
        self._alarm(job.deadline, _DELAY, job)

    def _reserve(self, s: Session, job: Job, now: float) -> bool:
        # READY/DELAYED/BURIED (already unlinked) -> RESERVED by s. False: journal refused.
        old_deadline = job.deadline
        old_state = job.state
        job.state = RESERVED
        job.reserves += 1
        job.deadline = now + job.ttr
        try:
            self.journal.job_changed(job)
        except JournalError:
            job.state = old_state
            job.reserves -= 1
            job.deadline = old_deadline
            return False
        job.reserver = s
        s.reserved[job] = None
        job.tube.reserved += 1
        self._alarm(job.deadline, _TTR, job)
        return True

    def _unreserve(self, job: Job) -> None:
        # RESERVED -> (caller decides): forget the reservation.
        s = job.reserver
        if s is not None:
            del s.reserved[job]
        job.reserver = None
        job.tube.reserved -= 1

    def _unlink(self, job: Job) -> None:
        """Take ``job`` out of whatever container its state puts it in."""
        state = job.state
        t = job.tube
        if state is READY:
            t.ready.remove(job)
            if job.pri < p.URGENT_THRESHOLD:
                t.urgent -= 1
        elif state is DELAYED:
            t.delayed.remove(job)
            self._stale += 1
        elif state is RESERVED:
            self._unreserve(job)
            self._stale += 1
        elif state is BURIED:
            del t.buried[job]

    def _forget(self, job: Job) -> None:
        # (unlinked) -> DELETED: drop it from the id index and its tube's reference. Its
        # TTR or delay alarm, if any, is stale from now on.
        job.state = DELETED
        del self.jobs[job.id]
        t = job.tube
        t.jobs -= 1
        if not t.jobs:
            self._maybe_drop(t)

    def _journal_quietly(self, job: Job) -> None:
        # Clock- and disconnect-driven changes cannot be refused (see journal.py).
        with contextlib.suppress(JournalError):
            self.journal.job_changed(job)

    # ---------------------------------------------------------------- waiting reserves

    def _best_ready_tube(self, s: Session) -> Tube | None:
        watch = s.watch
        if len(watch) == 1:
            t = watch[0]
            return t if t.ready and not t.paused else None
        best: Tube | None = None
        best_key = None
        for t in s.watch:
            if t.ready and not t.paused:
                key = t.ready.top_key()
                if best_key is None or key < best_key:
                    best_key = key
                    best = t
        return best

    def _start_wait(self, s: Session, timeout: int, now: float) -> None:
        s.waiting = True
        self.waiting += 1
        for t in s.watch:
            t.waiting[s] = None
        s.wait_deadline = now + timeout if timeout > 0 else None
        self._arm_waiter(s)

    def _arm_waiter(self, s: Session) -> None:
        wake = s.wait_deadline
        soonest = s.soonest_deadline()
        if soonest is not None:
            margin = soonest - SAFETY_MARGIN
            if wake is None or margin < wake:
                wake = margin
        if wake is not None:
            s.wake_seq = self._alarm(wake, _WAIT, s)

    def _end_wait(self, s: Session) -> None:
        s.waiting = False
        s.wake_seq = -1
        self.waiting -= 1
        for t in s.watch:
            del t.waiting[s]

    def _process_queue(self, tubes: list[Tube], now: float) -> None:
        # 1.12's process_queue restricted to the tubes that just gained ready jobs: give the
        # best (pri, id) job among tubes with waiters to that tube's first waiter, repeat.
        while True:
            best: Tube | None = None
            best_key = None
            for t in tubes:
                if t.waiting and t.ready and not t.paused:
                    key = t.ready.top_key()
                    if best_key is None or key < best_key:
                        best, best_key = t, key
            if best is None:
                return
            s = next(iter(best.waiting))
            job = self._pop_ready(best)
            self._end_wait(s)
            if self._reserve(s, job, now):
                self.deliveries.append((s, p.render_reserved(job.id, job.body)))
            else:
                self._push_ready(job)
                self.deliveries.append((s, p.INTERNAL_ERROR))

    # ---------------------------------------------------------------- the clock

    def _alarm(self, when: float, kind: int, obj: Any) -> int:
        seq = self._seq = self._seq + 1
        heappush(self.alarms, (when, seq, kind, obj))
        if self._stale > 1024 and self._stale * 2 > len(self.alarms):
            self._compact_alarms()
        return seq

    def arm_ttr(self, job: Job) -> None:
        """Schedule the TTR expiry of a reserved job at ``job.deadline`` (after touch)."""
        self._stale += 1
        self._alarm(job.deadline, _TTR, job)

    def arm_pause(self, t: Tube) -> None:
        """Schedule the end of ``t``'s pause at ``t.unpause_at``."""
        self._alarm(t.unpause_at, _PAUSE, t)

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must next run (None: nothing scheduled)."""
        alarms = self.alarms
        return alarms[0][0] if alarms else None

    def tick(self, now: float) -> float | None:
        """Do everything due at ``now``; return the next deadline."""
        alarms = self.alarms
        while alarms and alarms[0][0] <= now:
            when, seq, kind, obj = heappop(alarms)
            if kind == _TTR:
                if obj.state is RESERVED and obj.deadline == when:
                    self._expire(obj, now)
            elif kind == _DELAY:
                if obj.state is DELAYED and obj.deadline == when:
                    obj.tube.delayed.remove(obj)
                    # DELAYED -> READY: journaled as ready, not as a delay that ran out.
                    obj.state = READY
                    self._journal_quietly(obj)
                    self._make_ready(obj, now)
            elif kind == _PAUSE:
                tube: Tube = obj
                if tube.paused and tube.unpause_at == when and self.tubes.get(tube.name) is tube:
                    tube.paused = False
                    tube.pause = 0
                    self._process_queue([tube], now)
            elif kind == _WAIT:
                s = obj
                if s.waiting and s.wake_seq == seq:
                    self._wake_waiter(s, now)
        return self.next_deadline()

    def _expire(self, job: Job, now: float) -> None:
        # RESERVED -> READY: the TTR ran out.
        self._unreserve(job)
        job.timeouts += 1
        self.job_timeouts += 1
        job.state = READY
        self._journal_quietly(job)
        self._make_ready(job, now)

    def _wake_waiter(self, s: Session, now: float) -> None:
        soonest = s.soonest_deadline()
        if soonest is not None and now >= soonest - SAFETY_MARGIN:
            # DEADLINE_SOON wins over TIMED_OUT.
            self._end_wait(s)
            self.deliveries.append((s, p.DEADLINE_SOON))
        elif s.wait_deadline is not None and now >= s.wait_deadline:
            self._end_wait(s)
            self.deliveries.append((s, p.TIMED_OUT))
        else:
            self._arm_waiter(s)

    def _compact_alarms(self) -> None:
        live: list[Alarm] = []
        for alarm in self.alarms:
            when, seq, kind, obj = alarm
            if kind == _TTR:
                ok = obj.state is RESERVED and obj.deadline == when
            elif kind == _DELAY:
                ok = obj.state is DELAYED and obj.deadline == when
            elif kind == _PAUSE:
                ok = obj.paused and obj.unpause_at == when
            else:
                ok = obj.waiting and obj.wake_seq == seq
            if ok:
                live.append(alarm)
        live.sort()
        # In place: tick() may be iterating over this very list.
        self.alarms[:] = live
        self._stale = 0

    # ---------------------------------------------------------------- put

    def begin_put(self, s: Session) -> None:
        """A ``put`` line passed its checks: count it, mark a producer (before the body)."""
        self.counters["put"] += 1
        if not s.producer:
            s.producer = True
            self.producers += 1

    def put(self, s: Session, cmd: p.Put, body: bytes, now: float) -> bytes:
        """Create the job of ``cmd`` once ``body`` (size + 2 bytes) has arrived."""
        job_id = self.next_id
        self.next_id = job_id + 1
        if body[-2:] != p.CRLF:
            return p.EXPECTED_CRLF
        if self.draining:
            return p.DRAINING
        t = s.use
        job = Job(job_id, t, cmd.pri, cmd.delay, cmd.ttr or 1, body, now)
        if cmd.delay:
            job.state = DELAYED
            job.deadline = now + cmd.delay
        try:
            self.journal.job_put(job)
        except JournalError:
            return p.OUT_OF_MEMORY
        self.jobs[job_id] = job
        t.jobs += 1
        t.total_jobs += 1
        self.total_jobs += 1
        if cmd.delay:
            self._to_delayed(job)
        else:
            self._make_ready(job, now)
        return b"INSERTED %d\r\n" % job_id

    def restore(self, job: Job, tube_name: bytes, now: float) -> None:
        """Add a job recovered from a journal (reserved jobs come back ready).

        ``job.state``/``deadline`` say where it goes; the id counter moves past its id.
        """
        t = self.tube(tube_name)
        job.tube = t
        self.jobs[job.id] = job
        t.jobs += 1
        self.next_id = max(self.next_id, job.id + 1)
        if job.state is DELAYED:
            self._to_delayed(job)
        elif job.state is BURIED:
            t.buried[job] = None
        else:
            self._push_ready(job)
