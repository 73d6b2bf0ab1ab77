"""``discovery.CheckPlan``: which tubes discovery asks ``stats-tube`` of, on a fake clock."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cmdstalk_py.supervisor.discovery import (
    FIRST_CHECK_INTERVALS,
    MAX_CHECK_INTERVALS,
    MAX_CHECKS_PER_ROUND,
    CheckPlan,
)


def test_a_tube_in_use_is_looked_at_less_and_less_often_up_to_the_cap() -> None:
    plan = CheckPlan(interval=1.0)
    plan.add("t", now=0.0)
    assert plan.take_due(FIRST_CHECK_INTERVALS - 0.5) == []
    now = float(FIRST_CHECK_INTERVALS)
    gaps = []
    for _ in range(12):
        assert plan.take_due(now) == ["t"]
        plan.in_use("t", now)
        gaps.append(plan.due["t"] - now)
        now = plan.due["t"]
    assert gaps[:3] == [20.0, 40.0, 80.0]
    assert max(gaps) == MAX_CHECK_INTERVALS


def test_a_tube_that_looks_abandoned_is_looked_at_every_round() -> None:
    plan = CheckPlan(interval=0.5)
    plan.add("t", now=0.0)
    plan.in_use("t", now=5.0)
    plan.looks_abandoned("t", now=25.0)
    assert plan.due["t"] == 25.5
    # In use again: the delay starts over from the first one, then doubles.
    plan.in_use("t", now=25.5)
    assert plan.due["t"] == 25.5 + 2 * FIRST_CHECK_INTERVALS * 0.5


def test_a_round_looks_at_a_bounded_number_of_tubes_most_overdue_first() -> None:
    plan = CheckPlan(interval=1.0)
    for n in range(3 * MAX_CHECKS_PER_ROUND):
        plan.add(f"t{n}", now=float(n) / 100)
    first = plan.take_due(1000.0)
    assert first == [f"t{n}" for n in range(MAX_CHECKS_PER_ROUND)]
    plan.forget("t0")
    assert "t0" not in plan.take_due(1000.0, limit=10**6)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "forget", "in_use", "abandoned", "take"]),
            st.integers(0, 7),  # which tube
            st.floats(0, 5),  # how far the clock moves first
        ),
        max_size=60,
    )
)
def test_take_due_is_the_earliest_due_tubes_whatever_came_before(
    steps: list[tuple[str, int, float]],
) -> None:
    """The heap's answer is the scan's: the due tubes, earliest first (ties by name),
    however often tubes were rescheduled, forgotten or taken without a look."""
    plan = CheckPlan(interval=0.5)
    now = 0.0
    for op, n, dt in steps:
        now += dt
        tube = f"t{n}"
        if op == "take":
            limit = n % 4 + 1
            scan = sorted((at, t) for t, at in plan.due.items() if at <= now)
            assert plan.take_due(now, limit) == [t for _, t in scan[:limit]]
        elif op == "add":
            plan.add(tube, now)
        elif tube in plan.due and op == "forget":
            plan.forget(tube)
        elif tube in plan.due and op == "in_use":
            plan.in_use(tube, now)
        elif tube in plan.due:
            plan.looks_abandoned(tube, now)
