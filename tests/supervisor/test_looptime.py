"""``looptime``: the loop's own time. ``give_way`` spreads a burst of job starts over the
loop's iterations; ``Alarm`` is a sleep a poke cuts short, never losing the poke."""

from __future__ import annotations

import time

from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.supervisor.looptime import GIVE_WAY_AFTER, Alarm, give_way, take_lag

JOBS = 40
WORK = GIVE_WAY_AFTER / 2  # each start holds the loop this long (wall time)


def _burst(give: bool) -> list[str]:
    """JOBS starts arriving together, each holding the loop for WORK after ``give_way``;
    a ticker marks every iteration of the loop. What happened, in order."""
    order: list[str] = []
    loop = Loop()

    async def start() -> None:
        if give:
            await give_way()
        until = time.monotonic() + WORK
        while time.monotonic() < until:
            pass
        order.append("job")

    def tick() -> None:
        order.append("tick")
        if order.count("job") < JOBS:
            loop.call_soon(tick)  # runs in the next iteration: one tick per iteration

    async def main() -> None:
        loop.call_soon(tick)
        await tools.gather(*(start() for _ in range(JOBS)))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return order


def _iterations_within_the_burst(order: list[str]) -> int:
    first, last = order.index("job"), len(order) - 1 - order[::-1].index("job")
    return order[first:last].count("tick")


def test_a_burst_of_job_starts_lets_the_loop_poll_between_them() -> None:
    # Every start holds WORK, so at most a few fit in one iteration's GIVE_WAY_AFTER (more
    # iterations still on a busy machine, where each start takes longer).
    assert _iterations_within_the_burst(_burst(give=True)) >= JOBS // 4
    assert _burst(give=True).count("job") == JOBS


def test_without_give_way_the_burst_is_one_iteration() -> None:
    """What ``give_way`` prevents: the starts run back to back, nothing in between."""
    assert _iterations_within_the_burst(_burst(give=False)) == 0


def test_give_way_on_a_fresh_loop_returns_at_once() -> None:
    async def main() -> int:
        loop, turns = get_running_loop(), []

        def tick() -> None:
            turns.append(1)
            loop.call_soon(tick)

        loop.call_soon(tick)
        await give_way()
        return len(turns)

    assert tools.run(main()) <= 1  # not one iteration given away


def test_the_loop_lag_is_the_longest_span_between_two_polls() -> None:
    loop = Loop()

    def hold() -> None:
        until = time.monotonic() + 0.05
        while time.monotonic() < until:
            pass

    async def main() -> float:
        take_lag(loop)
        loop.call_soon(hold)
        await tools.sleep(0.01)
        return take_lag(loop)

    try:
        lag = loop.run_until_complete(main())
    finally:
        loop.close()
    assert lag >= 0.05
    take_lag(loop)  # what the loop's last iteration held
    assert take_lag(loop) == 0.0  # taken: the next look starts afresh


def test_an_alarm_poked_before_it_sleeps_ends_the_next_sleep_at_once() -> None:
    async def main() -> list[str]:
        alarm, seen = Alarm(), []
        alarm.poke()
        async with tools.timeout(30):
            await alarm.sleep(3600)  # the earlier poke ends it
        seen.append("poked")
        get_running_loop().call_soon(alarm.poke)
        async with tools.timeout(30):
            await alarm.sleep(3600)  # a poke while it sleeps
        seen.append("woken")
        await alarm.sleep(0.01)  # no poke left over: the timer ends it
        seen.append("rang")
        return seen

    assert tools.run(main()) == ["poked", "woken", "rang"]
