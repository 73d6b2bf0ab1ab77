"""policy.py: every decision as a pure function, no server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.supervisor.policy import (
    MAX_DELAY,
    Decision,
    backoff_delay,
    decide,
    kill_schedule,
    precheck,
)
from cmdstalk_py.supervisor.results import Outcome


def decide_job(exit_code: int | None, releases: int = 0, **kw: object) -> Decision:
    """``decide`` for a job that was neither killed nor stopped, unless ``kw`` says so."""
    args: dict[str, object] = {
        "exit_code": exit_code,
        "ttr_killed": False,
        "shutdown_killed": False,
        "stopping": False,
        "releases": releases,
    }
    args.update(kw)
    return decide(**args)  # type: ignore[arg-type]


def test_backoff_is_go_releases_to_the_fourth() -> None:
    assert [backoff_delay(r) for r in range(5)] == [0, 1, 16, 81, 256]


def test_backoff_exponent_cap_and_server_limit() -> None:
    assert backoff_delay(3, exponent=2) == 9
    assert backoff_delay(9, cap=60) == 60
    assert backoff_delay(2, cap=60) == 16
    assert backoff_delay(10_000) == MAX_DELAY
    assert backoff_delay(-1) == 0


def test_exit_zero_deletes() -> None:
    assert decide_job(0) == Decision(Outcome.DELETED)
    assert decide_job(0).command == "delete"


def test_failure_releases_with_backoff_by_releases_so_far() -> None:
    assert decide_job(1, releases=0) == Decision(Outcome.RELEASED, 0)
    assert decide_job(1, releases=2) == Decision(Outcome.RELEASED, 16)
    assert decide_job(1, releases=2).command == "release"


def test_spawn_failure_and_foreign_signal_count_as_failures() -> None:
    assert decide_job(None, releases=1) == Decision(Outcome.RELEASED, 1)


def test_a_failure_always_releases_the_limit_is_checked_at_reservation() -> None:
    # Go: the 10th failure releases (delay 9⁴ s) like any other; the job is buried unrun
    # when reserved with 10 releases (``precheck``).
    assert decide_job(1, releases=8) == Decision(Outcome.RELEASED, 4096)
    assert decide_job(1, releases=9) == Decision(Outcome.RELEASED, 6561)
    assert decide_job(1, releases=10) == Decision(Outcome.RELEASED, 10_000)


def test_bury_exit_codes_bury_at_once() -> None:
    assert decide_job(78, bury_exit_codes=frozenset({65, 78})) == Decision(Outcome.BURIED)
    assert decide_job(1, bury_exit_codes=frozenset({65, 78})).outcome is Outcome.RELEASED


def test_ttr_kill_buries() -> None:
    d = decide_job(None, ttr_killed=True)
    assert d == Decision(Outcome.TIMEOUT_BURIED)
    assert d.command == "bury"


def test_ttr_kill_during_shutdown_and_shutdown_kill_release_at_once() -> None:
    # Issue 4: while stopping, running jobs may run to their TTR deadline, then are killed
    # and released (not buried), at once and with their priority.
    for kw in ({"ttr_killed": True}, {"shutdown_killed": True}, {"ttr_killed": True,
               "shutdown_killed": True}):  # fmt: skip
        d = decide_job(None, releases=9, stopping=True, **kw)
        assert d == Decision(Outcome.SHUTDOWN_RELEASED, 0)
        assert d.command == "release"


def test_while_stopping_a_command_that_ends_by_itself_is_judged_as_usual() -> None:
    assert decide_job(0, stopping=True) == Decision(Outcome.DELETED)
    assert decide_job(1, releases=2, stopping=True) == Decision(Outcome.RELEASED, 16)


def test_backoff_options_reach_the_decision() -> None:
    d = decide_job(1, releases=3, backoff_exponent=2.0, backoff_max=5)
    assert d == Decision(Outcome.RELEASED, 5)


@pytest.mark.parametrize(
    ("releases", "timeouts", "kicks", "expected"),
    [
        (0, 0, 0, None),
        (9, 0, 0, None),
        (10, 0, 0, Outcome.PRECHECK_BURIED),  # Go: releases >= 10
        (0, 1, 0, Outcome.PRECHECK_BURIED),  # Go: timed out on the server
        (0, 1, 1, None),  # kicked after that timeout: a fresh try
        (0, 2, 1, Outcome.PRECHECK_BURIED),  # and it timed out again
        (10, 0, 1, None),  # kicked after the releases limit: a fresh try
        (11, 0, 1, Outcome.PRECHECK_BURIED),  # which failed (released) again
        (11, 0, 2, None),  # kicked once more
        (3, 0, 3, None),  # kicked out of its backoff delays: never counts against it
    ],
)
def test_precheck(releases: int, timeouts: int, kicks: int, expected: Outcome | None) -> None:
    got = precheck(releases, timeouts, kicks, max_releases=10, max_timeouts=1)
    assert (got.outcome if got else None) is expected


def test_precheck_limits_are_configurable() -> None:
    assert precheck(3, 0, 0, max_releases=3, max_timeouts=1) is not None
    assert precheck(0, 1, 0, max_releases=10, max_timeouts=2) is None
    assert precheck(0, 2, 0, max_releases=10, max_timeouts=2) is not None


def test_kill_schedule_examples() -> None:
    one = kill_schedule(1, margin=1.0, grace=2.0)
    assert (one.term_after, one.kill_after) == (0.5, 0.75)
    sixty = kill_schedule(60, margin=1.0, grace=2.0)
    assert (sixty.term_after, sixty.kill_after) == (57.0, 59.0)
    assert kill_schedule(0, 1.0, 2.0) == one  # the server treats TTR 0 as 1


@given(
    ttr=st.integers(min_value=0, max_value=100_000),
    margin=st.floats(min_value=0, max_value=1000),
    grace=st.floats(min_value=0, max_value=1000),
)
def test_kill_always_lands_before_the_ttr(ttr: int, margin: float, grace: float) -> None:
    plan = kill_schedule(ttr, margin, grace)
    assert 0 < plan.term_after <= plan.kill_after
    assert plan.kill_after <= max(ttr, 1) - min(margin, max(ttr, 1) / 4) + 1e-9
    assert plan.grace <= grace
