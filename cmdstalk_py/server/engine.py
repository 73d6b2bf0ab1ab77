"""The queue engine: jobs, tubes, reservations and timers, driven by the caller's clock.

Every job state change is one public method here, named after the transition: ``put``,
``reserve``/``reserve_job``, ``release``, ``bury``, ``kick``/``kick_job``, ``delete``,
``touch``, ``expire`` (TTR ran out) and ``promote`` (delay ran out). Each sets the job's
new fields, tells the :class:`~cmdstalk_py.server.journal.Journal`, and only if the
journal took it moves the job (:class:`~cmdstalk_py.server.store.JobStore` files it).
It returns the job or an :class:`~cmdstalk_py.server.outcome.Outcome`, never bytes.

Every method takes ``now`` (seconds, any monotonic clock); nothing here reads a clock or
sleeps. :meth:`Engine.tick` performs what is due (delayed jobs becoming ready, TTR expiry,
pause ends, reserve timeouts and DEADLINE_SOON) and returns when it next needs to run.
Blocked reserves (who waits, wake-ups, answers) live in ``waiters``, pauses in ``pauses``.
"""

from __future__ import annotations

from cmdstalk_py.server.alarms import DELAY, PAUSE, TTR, Alarms
from cmdstalk_py.server.job import BURIED, DELAYED, DELETED, READY, RESERVED, Job, Mark
from cmdstalk_py.server.journal import JournalError, NullJournal
from cmdstalk_py.server.limits import DEFAULT_MAX_JOB_SIZE
from cmdstalk_py.server.outcome import Outcome
from cmdstalk_py.server.pauses import Pauses
from cmdstalk_py.server.session import Session
from cmdstalk_py.server.stats import CMD_COUNTERS, ServerInfo, rusage
from cmdstalk_py.server.store import JobStore
from cmdstalk_py.server.tube import Tube, best_ready
from cmdstalk_py.server.waiters import Waiters

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from cmdstalk_py.server.journal import Journal

#: What a transition hands back: the job it moved, or why it did not.
Result = Job | Outcome
_NOT_FOUND = Outcome.NOT_FOUND
_JOURNAL_FAILED = Outcome.JOURNAL_FAILED


class Engine:
    """All queue state of one server."""

    def __init__(
        self,
        now: float = 0.0,
        max_job_size: int = DEFAULT_MAX_JOB_SIZE,
        journal: Journal | None = None,
        info: ServerInfo | None = None,
        cpu: Any = rusage,
    ) -> None:
        self.max_job_size = max_job_size
        self.journal: Journal = journal if journal is not None else NullJournal()
        self.info = info if info is not None else ServerInfo()
        self.cpu, self.started = cpu, now
        self._alarms = Alarms()
        #: The alarm heap itself: the network layer reads the next deadline off it.
        self.alarms = self._alarms.heap
        self.store = JobStore(self._alarms)
        self.jobs = self.store.jobs
        self.tubes = self.store.tubes
        self.default = self.tubes.tube(b"default")
        self.default.permanent = True
        self.next_id, self.draining = 1, False
        self.counters: dict[str, int] = dict.fromkeys(CMD_COUNTERS, 0)
        self.job_timeouts = self.total_jobs = 0
        self.connections = self.total_connections = 0
        self.producers = self.workers = 0
        #: Connections blocked in a reserve, and the answers they are due.
        self.waiters = Waiters(self._alarms)
        self.pauses = Pauses(self._alarms, self.waiters, self._serve)

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
            self.waiters.end(session)
        touched: dict[Tube, None] = {}
        for job in list(session.reserved):
            # RESERVED -> READY: its connection is gone (cannot be refused, see journal.py).
            job.state = READY
            self._journal_quietly(job)
            self.store.take(job, RESERVED)
            self.store.place(job)
            touched[job.tube] = None
        if touched:
            self.waiters.process_queue(list(touched), now, self._serve)
        self.tubes.leave(session)
        if session.producer:
            self.producers -= 1
        if session.worker:
            self.workers -= 1
        self.connections -= 1

    # ---------------------------------------------------------------- tubes

    def pause_tube(self, name: bytes, delay: int, now: float) -> Tube | Outcome:
        """No job of ``name`` is reserved for ``delay`` seconds."""
        t = self.tubes.get(name)
        if t is None:
            return _NOT_FOUND
        t.cmd_pause += 1
        self.pauses.start(t, delay, now)
        return t

    # ---------------------------------------------------------------- transitions

    def begin_put(self, s: Session, now: float) -> tuple[int, float]:
        """A ``put`` line passed its checks, its body is on its way: like 1.12, the job's
        id and creation time are taken now (a put begun first gets the smaller id)."""
        if not s.producer:
            s.producer = True
            self.producers += 1
        s.incoming = incoming = (self.next_id, now)
        self.next_id += 1
        return incoming

    def put(self, s: Session, pri: int, delay: int, ttr: int, body: bytes, now: float) -> Result:
        """(new) -> READY, or DELAYED for ``delay`` seconds, in ``s``'s used tube.

        ``body`` is the data chunk with its CRLF; the id is the one taken at the line
        (:meth:`begin_put`), else a new one. Like 1.12, a refused put (BAD_BODY, DRAINING,
        JOURNAL_FAILED) uses its id up, as does closing before the body is complete.
        """
        job_id, now = s.incoming or self.begin_put(s, now)
        s.incoming = None
        if body[-2:] != b"\r\n":
            return Outcome.BAD_BODY
        if self.draining:
            return Outcome.DRAINING
        t = s.use
        job = Job(job_id, t, pri, delay, ttr or 1, body, now)
        if delay:
            job.state = DELAYED
            job.deadline = now + delay
        try:
            self.journal.job_put(job)
        except JournalError:
            return _JOURNAL_FAILED
        self.store.add(job)
        t.total_jobs += 1
        self.total_jobs += 1
        if delay:
            self.store.place(job)
        else:
            self._make_ready(job, now)
        return job

    def reserve(self, s: Session, timeout: int, now: float) -> Result:
        """READY -> RESERVED: the best job of ``s``'s watched tubes.

        ``timeout`` -1 waits for ever, 0 not at all. Without a job at hand: DEADLINE_SOON,
        TIMED_OUT, or WAITING (the answer comes later, through ``waiters``).
        """
        if not s.worker:
            s.worker = True
            self.workers += 1
        self.pauses.end_due(s.watch, now)
        t = best_ready(s.watch)
        if t is not None:
            return self._serve(s, t, now)
        # 1.12 does not look at pauses here: a ready job in a paused tube still counts.
        if s.reserved and not any(w.ready for w in s.watch) and s.deadline_soon(now):
            return Outcome.DEADLINE_SOON
        if timeout == 0:
            # 1.12 parks the reserve until its next tick, which answers DEADLINE_SOON first.
            return Outcome.DEADLINE_SOON if s.deadline_soon(now) else Outcome.TIMED_OUT
        self.waiters.start(s, timeout, now)
        return Outcome.WAITING

    def reserve_job(self, s: Session, job_id: int, now: float) -> Result:
        """READY/DELAYED/BURIED -> RESERVED by ``s``, in any tube, paused or not."""
        job = self.jobs.get(job_id)
        if job is None or job.state is RESERVED:
            return _NOT_FOUND
        old = job.state
        if not self._reserve(s, job, now):
            return _JOURNAL_FAILED
        self.store.take(job, old)
        if not s.worker:
            s.worker = True
            self.workers += 1
        return job

    def release(self, s: Session, job_id: int, pri: int, delay: int, now: float) -> Result:
        """RESERVED -> READY, or DELAYED for ``delay`` seconds, with priority ``pri``."""
        job = self._owned(s, job_id)
        if job is None:
            return _NOT_FOUND
        mark = job.mark()
        job.pri = pri
        job.delay = delay
        job.releases += 1
        if delay:
            job.state = DELAYED
            job.deadline = now + delay
        else:
            job.state = READY
        if not self._journal(job, mark):
            return _JOURNAL_FAILED
        self.store.take(job, RESERVED)
        if delay:
            self.store.place(job)
        else:
            self._make_ready(job, now)
        return job

    def bury(self, s: Session, job_id: int, pri: int) -> Result:
        """RESERVED -> BURIED, last in its tube's buried FIFO, with priority ``pri``."""
        job = self._owned(s, job_id)
        if job is None:
            return _NOT_FOUND
        mark = job.mark()
        job.pri = pri
        job.buries += 1
        job.state = BURIED
        if not self._journal(job, mark):
            return _JOURNAL_FAILED
        self.store.take(job, RESERVED)
        self.store.place(job)
        return job

    def touch(self, s: Session, job_id: int, now: float) -> Result:
        """RESERVED -> RESERVED with a fresh TTR.

        Not journalled: nothing persisted changes (a reserved job is logged without its
        deadline and comes back ready after a restart).
        """
        job = self._owned(s, job_id)
        if job is None:
            return _NOT_FOUND
        job.deadline = now + job.ttr
        self.store.retime(job)
        return job

    def delete(self, s: Session, job_id: int) -> Result:
        """(any state) -> DELETED; a reserved job only by the connection holding it."""
        job = self.jobs.get(job_id)
        if job is None or (job.state is RESERVED and job.reserver is not s):
            return _NOT_FOUND
        try:
            self.journal.job_deleted(job)
        except JournalError:
            return _JOURNAL_FAILED
        self.store.take(job, job.state)
        job.tube.cmd_delete += 1
        job.state = DELETED
        self.store.remove(job)
        return job

    def kick(self, t: Tube, bound: int, now: float) -> int:
        """BURIED -> READY for up to ``bound`` jobs of ``t``, oldest first; only when none
        is buried, DELAYED -> READY, earliest first. Returns how many were kicked."""
        count = 0
        buried = bool(t.buried)
        while count < bound:
            job = next(iter(t.buried), None) if buried else t.delayed.peek()
            if job is None or not self._kick(job, now):
                break
            count += 1
        return count

    def kick_job(self, job_id: int, now: float) -> Result:
        """BURIED/DELAYED -> READY for one job, in any tube."""
        job = self.jobs.get(job_id)
        if job is None or job.state is READY or job.state is RESERVED:
            return _NOT_FOUND
        return job if self._kick(job, now) else _JOURNAL_FAILED

    def expire(self, job: Job, now: float) -> None:
        """RESERVED -> READY: the TTR ran out (journalled; cannot be refused)."""
        job.timeouts += 1
        job.state = READY
        self._journal_quietly(job)
        self.job_timeouts += 1
        self.store.take(job, RESERVED, fired=True)
        self._make_ready(job, now)

    def promote(self, job: Job, now: float) -> None:
        """DELAYED -> READY: the delay ran out (journalled as ready; cannot be refused)."""
        job.state = READY
        self._journal_quietly(job)
        self.store.take(job, DELAYED, fired=True)
        self._make_ready(job, now)

    def restore(self, job: Job, tube_name: bytes, now: float) -> None:
        """Add a recovered job where its state says (reserved comes back ready), ids past it."""
        job.tube = self.tubes.tube(tube_name)
        if job.state is RESERVED:
            job.state = READY
        self.store.add(job)
        self.next_id = max(self.next_id, job.id + 1)
        self.store.place(job)

    # ---------------------------------------------------------------- transition steps

    def _owned(self, s: Session, job_id: int) -> Job | None:
        job = self.jobs.get(job_id)
        return job if job is not None and job.state is RESERVED and job.reserver is s else None

    def _journal(self, job: Job, mark: Mark) -> bool:
        # The job's fields already say what it becomes; a refusal puts them back.
        try:
            self.journal.job_changed(job)
        except JournalError:
            job.rollback(mark)
            return False
        return True

    def _journal_quietly(self, job: Job) -> None:
        # Clock- and disconnect-driven changes cannot be refused (see journal.py).
        try:  # noqa: SIM105 (contextlib is kept off the serving path: start-up time)
            self.journal.job_changed(job)
        except JournalError:
            pass

    def _kick(self, job: Job, now: float) -> bool:
        # BURIED/DELAYED -> READY. False: the journal refused, the job stays where it was.
        old = job.state
        mark = job.mark()
        job.kicks += 1
        job.state = READY
        if not self._journal(job, mark):
            return False
        self.store.take(job, old)
        self._make_ready(job, now)
        return True

    def _reserve(self, s: Session, job: Job, now: float) -> bool:
        # -> RESERVED by s; the caller takes it out of its old place. False: refused.
        # Every reserve passes here: _journal's work in line, with only the fields it sets.
        state, deadline = job.state, job.deadline
        job.state = RESERVED
        job.reserves += 1
        job.deadline = now + job.ttr
        try:
            self.journal.job_changed(job)
        except JournalError:
            job.state, job.deadline = state, deadline
            job.reserves -= 1
            return False
        self.store.hold(job, s)
        return True

    def _serve(self, s: Session, t: Tube, now: float) -> Result:
        # READY -> RESERVED for t's best job, taken out first (while it is still READY).
        job = self.store.pop_ready(t)
        if self._reserve(s, job, now):
            return job
        self.store.place(job)
        return _JOURNAL_FAILED

    def _make_ready(self, job: Job, now: float) -> None:
        # (READY, not filed yet) -> to the tube's first waiter if there is one, else filed.
        # A tube with waiters and no pause has no ready job: this one is the best.
        t = job.tube
        waiting = t.waiting
        if waiting and not t.paused:
            s = next(iter(waiting))
            self.waiters.end(s)
            if self._reserve(s, job, now):
                self.waiters.answer(s, job)
                return
            self.waiters.answer(s, _JOURNAL_FAILED)
        self.store.place(job)

    # ---------------------------------------------------------------- the clock

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must next run (None: nothing scheduled)."""
        return self._alarms.next_deadline()

    def tick(self, now: float) -> float | None:
        """Do everything due at ``now``; return the next deadline."""
        pop_due = self._alarms.pop_due
        while (alarm := pop_due(now)) is not None:
            kind, obj = alarm[2], alarm[3]
            if kind == TTR:
                self.expire(obj, now)
            elif kind == DELAY:
                self.promote(obj, now)
            elif kind == PAUSE:
                self.pauses.end(obj, now)
            else:
                self.waiters.wake(obj, now)
        return self._alarms.next_deadline()
