"""The engine's transitions one by one, on a clock moved by hand: values in, values out.

Each transition returns the job it moved or an :class:`Outcome`; nothing here sees reply
bytes except the tests of the dispatcher's rendering at the end.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from cmdstalk_py.server import commands
from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.job import BURIED, DELAYED, READY, RESERVED, Job
from cmdstalk_py.server.outcome import Outcome
from cmdstalk_py.server.session import SAFETY_MARGIN, Session
from tests.server.journals import RecordingJournal

T0 = 500.0


@pytest.fixture
def journal() -> RecordingJournal:
    return RecordingJournal()


@pytest.fixture
def e(journal: RecordingJournal) -> Engine:
    return Engine(T0, journal=journal)


def put(e: Engine, s: Session, now: float = T0, pri: int = 0, delay: int = 0,
        ttr: int = 60) -> Job:
    job = e.put(s, pri, delay, ttr, b"body\r\n", now)
    assert isinstance(job, Job), job
    return job


def reserve(e: Engine, s: Session, now: float = T0, timeout: int = -1) -> Job:
    job = e.reserve(s, timeout, now)
    assert isinstance(job, Job), job
    return job


# ------------------------------------------------------------------ put and reserve


def test_put_files_ready_or_delayed(e: Engine, journal: RecordingJournal) -> None:
    s = e.connect()
    ready = put(e, s)
    delayed = put(e, s, delay=10)
    assert (ready.state, delayed.state) == (READY, DELAYED)
    assert delayed.deadline == T0 + 10
    assert e.next_deadline() == T0 + 10
    assert journal.log == [("put", 1, "ready"), ("put", 2, "delayed")]


def test_refused_puts_use_up_their_ids(e: Engine, journal: RecordingJournal) -> None:
    s = e.connect()
    assert e.put(s, 0, 0, 1, b"no crlf", T0) is Outcome.BAD_BODY
    e.draining = True
    assert e.put(s, 0, 0, 1, b"x\r\n", T0) is Outcome.DRAINING
    e.draining = False
    journal.fail = True
    assert e.put(s, 0, 0, 1, b"x\r\n", T0) is Outcome.JOURNAL_FAILED
    journal.fail = False
    assert put(e, s).id == 4
    assert list(e.jobs) == [4]


def test_reserve_without_a_job(e: Engine) -> None:
    s = e.connect()
    assert e.reserve(s, 0, T0) is Outcome.TIMED_OUT
    assert e.reserve(s, 5, T0) is Outcome.WAITING
    assert e.waiters.count == 1
    assert e.next_deadline() == T0 + 5


def test_reserve_job_takes_any_state(e: Engine) -> None:
    s = e.connect()
    delayed = put(e, s, delay=30)
    assert e.reserve_job(s, delayed.id, T0) is delayed
    assert (delayed.state, delayed.deadline, delayed.reserves) == (RESERVED, T0 + 60, 1)
    assert e.reserve_job(s, delayed.id, T0) is Outcome.NOT_FOUND
    assert e.bury(s, delayed.id, 7) is delayed
    assert e.reserve_job(s, delayed.id, T0 + 1) is delayed
    assert e.tubes.get(b"default") is not None
    assert len(e.default.delayed) == 0 and not e.default.buried


# ------------------------------------------------------------------ the owner's transitions


def test_release_bury_touch_delete_need_the_owner(e: Engine) -> None:
    owner, other = e.connect(), e.connect()
    job = put(e, owner)
    reserve(e, owner)
    for attempt in (
        e.release(other, job.id, 0, 0, T0),
        e.bury(other, job.id, 0),
        e.touch(other, job.id, T0),
        e.delete(other, job.id),
    ):
        assert attempt is Outcome.NOT_FOUND
    assert e.touch(owner, job.id, T0 + 30) is job
    assert job.deadline == T0 + 90
    assert e.release(owner, job.id, 9, 5, T0 + 31) is job
    assert (job.state, job.pri, job.deadline, job.releases) == (DELAYED, 9, T0 + 36, 1)
    assert e.delete(other, job.id) is job
    assert job.id not in e.jobs


def test_refused_changes_leave_the_job_as_it_was(e: Engine, journal: RecordingJournal) -> None:
    s = e.connect()
    first, second = put(e, s), put(e, s)
    reserve(e, s)
    reserve(e, s)
    assert e.bury(s, first.id, 1) is first
    assert e.bury(s, second.id, 2) is second
    journal.fail = True
    assert e.kick_job(first.id, T0) is Outcome.JOURNAL_FAILED
    assert e.kick(e.default, 10, T0) == 0
    assert e.reserve_job(s, second.id, T0) is Outcome.JOURNAL_FAILED
    assert e.delete(s, first.id) is Outcome.JOURNAL_FAILED
    # Still buried, in their order, with their counters untouched.
    assert list(e.default.buried) == [first, second]
    assert (first.state, first.kicks, first.reserves) == (BURIED, 0, 1)
    journal.fail = False
    assert e.kick(e.default, 1, T0) == 1
    assert first.state is READY


# ------------------------------------------------------------------ the clock


def test_expire_and_promote_come_from_tick(e: Engine, journal: RecordingJournal) -> None:
    s = e.connect()
    job = put(e, s, ttr=2)
    later = put(e, s, delay=3)
    reserve(e, s)
    journal.log.clear()
    assert e.tick(T0 + 2) == T0 + 3
    assert (job.state, job.timeouts, e.job_timeouts) == (READY, 1, 1)
    e.tick(T0 + 3)
    assert later.state is READY
    assert journal.log == [("changed", job.id, "ready"), ("changed", later.id, "ready")]


def test_a_refused_expiry_still_happens(e: Engine, journal: RecordingJournal) -> None:
    s = e.connect()
    job = put(e, s, ttr=1)
    reserve(e, s)
    journal.fail = True
    e.tick(T0 + 1)
    assert job.state is READY


# ------------------------------------------------------------------ blocked reserves


def test_a_blocked_reserve_is_served_by_a_put_and_a_release(e: Engine) -> None:
    prod, worker = e.connect(), e.connect()
    assert e.reserve(worker, -1, T0) is Outcome.WAITING
    job = put(e, prod)
    assert e.waiters.take() == [(worker, job)]
    other = put(e, prod)
    assert reserve(e, prod) is other
    assert e.reserve(worker, -1, T0) is Outcome.WAITING
    assert e.release(prod, other.id, 0, 0, T0) is other
    assert e.waiters.take() == [(worker, other)]
    assert (job.reserver, other.reserver) == (worker, worker)


def test_a_blocked_reserve_is_served_by_a_kick(e: Engine) -> None:
    prod, worker = e.connect(), e.connect()
    job = put(e, prod)
    reserve(e, prod)
    assert e.bury(prod, job.id, 0) is job
    assert e.reserve(worker, -1, T0) is Outcome.WAITING
    assert e.kick(e.default, 1, T0) == 1
    assert e.waiters.take() == [(worker, job)]
    assert job.reserver is worker


def test_a_blocked_reserve_is_served_by_an_expiry(e: Engine) -> None:
    owner, worker = e.connect(), e.connect()
    job = put(e, owner, ttr=5)
    reserve(e, owner)
    assert e.reserve(worker, -1, T0) is Outcome.WAITING
    e.tick(T0 + 5)
    assert e.waiters.take() == [(worker, job)]


def test_a_blocked_reserve_times_out(e: Engine) -> None:
    s = e.connect()
    assert e.reserve(s, 3, T0) is Outcome.WAITING
    e.tick(T0 + 2.9)
    assert e.waiters.take() == []
    e.tick(T0 + 3)
    assert e.waiters.take() == [(s, Outcome.TIMED_OUT)]
    assert e.waiters.count == 0


def test_abort_wait(e: Engine) -> None:
    s = e.connect()
    assert e.waiters.abort(s) is False
    assert e.reserve(s, -1, T0) is Outcome.WAITING
    assert e.waiters.abort(s) is True
    assert e.waiters.count == 0


# ------------------------------------------------------------------ the DEADLINE_SOON rule


def test_deadline_soon_from_the_margin_on(e: Engine) -> None:
    s = e.connect()
    job = put(e, s, ttr=5)
    reserve(e, s)
    assert s.deadline_soon_at() == job.deadline - SAFETY_MARGIN
    before = job.deadline - SAFETY_MARGIN - 0.001
    assert not s.deadline_soon(before)
    assert e.reserve(s, 0, before) is Outcome.TIMED_OUT
    assert e.reserve(s, 0, job.deadline - SAFETY_MARGIN) is Outcome.DEADLINE_SOON


def test_a_waiting_reserve_wakes_at_the_margin(e: Engine) -> None:
    s = e.connect()
    job = put(e, s, ttr=5)
    reserve(e, s)
    assert e.reserve(s, 100, T0) is Outcome.WAITING
    assert e.next_deadline() == job.deadline - SAFETY_MARGIN
    e.tick(job.deadline - SAFETY_MARGIN)
    assert e.waiters.take() == [(s, Outcome.DEADLINE_SOON)]
    assert job.state is RESERVED


# ------------------------------------------------------------------ rendering


def test_every_outcome_but_waiting_has_a_reply() -> None:
    assert set(commands.OUTCOME_REPLIES) == set(Outcome) - {Outcome.WAITING}


def test_deliveries_are_rendered_by_the_dispatcher(e: Engine) -> None:
    waiter, timer, prod = e.connect(), e.connect(), e.connect()
    assert e.reserve(waiter, -1, T0) is Outcome.WAITING
    assert e.reserve(timer, 1, T0) is Outcome.WAITING
    job = put(e, prod)
    e.tick(T0 + 1)
    assert commands.deliveries(e) == [
        (waiter, p.render_reserved(job.id, b"body\r\n")),
        (timer, p.TIMED_OUT),
    ]
    assert commands.deliveries(e) == []


def test_the_engine_imports_no_protocol_code() -> None:
    code = (
        "import sys, cmdstalk_py.server.engine\n"
        "bad = [m for m in ('cmdstalk_py.server.commands', 'cmdstalk_py.server.protocol')"
        " if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
