"""Where each job sits: the id index, the tubes, and the queue a job's state files it in.

The engine decides every state change and writes it; this module only files the job
where its state says (its tube's ready queue, delay heap or buried FIFO, or with the
connection that reserved it: its reservations, and the soonest of them), sets the timer
that state needs (end of delay, TTR) and takes it out again.
"""

from __future__ import annotations

from cmdstalk_py.server.alarms import DELAY, TTR, Alarms
from cmdstalk_py.server.job import DELAYED, READY, RESERVED, URGENT_THRESHOLD, Job, JobState
from cmdstalk_py.server.tube import TubeSet

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from cmdstalk_py.server.session import Session
    from cmdstalk_py.server.tube import Tube


class JobStore:
    """Jobs by id and by place, for one engine."""

    __slots__ = ("alarms", "jobs", "tubes")

    def __init__(self, alarms: Alarms) -> None:
        self.jobs: dict[int, Job] = {}
        self.tubes = TubeSet(self.jobs)
        self.alarms = alarms

    def add(self, job: Job) -> None:
        """Index a new or recovered job (it counts towards its tube from now on)."""
        self.jobs[job.id] = job
        job.tube.jobs += 1

    def remove(self, job: Job) -> None:
        """Forget a deleted job, already taken out of its place; its tube may go with it."""
        del self.jobs[job.id]
        t = job.tube
        t.jobs -= 1
        if not t.jobs:
            self.tubes.drop_if_unused(t)

    def place(self, job: Job) -> None:
        """File ``job`` where its state says: READY, DELAYED (until ``deadline``), BURIED."""
        t = job.tube
        state = job.state
        if state is READY:
            t.ready.push(job)
            if job.pri < URGENT_THRESHOLD:
                t.urgent += 1
        elif state is DELAYED:
            t.delayed.push((job.deadline, job.id), job)
            self.alarms.add(job.deadline, DELAY, job)
        else:
            t.buried[job] = None

    def hold(self, job: Job, s: Session) -> None:
        """File a RESERVED job with ``s``, its TTR timer set for ``job.deadline``.

        Every reserve passes here: the session's side is done in line, keeping its
        ``soonest`` right (a reservation ending sooner than the known soonest replaces it).
        """
        job.reserver = s
        s.reserved[job] = None
        soonest = s.soonest
        if soonest is not None and job.deadline < soonest.deadline:
            s.soonest = job
        job.tube.reserved += 1
        self.alarms.add(job.deadline, TTR, job)

    def retime(self, job: Job) -> None:
        """A reserved job's deadline moved (touch): a new TTR timer, the old one stale."""
        self.alarms.stale += 1  # the old TTR alarm
        self.alarms.add(job.deadline, TTR, job)
        if job.reserver is not None:
            job.reserver.retimed(job)

    def pop_ready(self, t: Tube) -> Job:
        """Take ``t``'s next ready job out, while it is still READY (the queue checks)."""
        job = t.ready.pop()
        if job.pri < URGENT_THRESHOLD:
            t.urgent -= 1
        return job

    def take(self, job: Job, state: JobState, fired: bool = False) -> None:
        """Take ``job`` out of where ``state``, its state until now, filed it.

        ``fired``: its timer is the one that just went off, so no stale one is left.
        """
        t = job.tube
        if state is READY:
            t.ready.remove(job)
            if job.pri < URGENT_THRESHOLD:
                t.urgent -= 1
            return
        if state is DELAYED:
            t.delayed.remove(job)
        elif state is RESERVED:
            s = job.reserver
            if s is not None:  # the session's side in line, as in hold
                del s.reserved[job]
                if s.soonest is job:
                    s.soonest = None
            job.reserver = None
            t.reserved -= 1
        else:
            del t.buried[job]
            return
        if not fired:
            self.alarms.stale += 1  # its timer, left in the heap until it comes up or a sweep
