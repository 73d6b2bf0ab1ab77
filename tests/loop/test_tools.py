"""What coroutines on the project's loop wait with (loop/tools.py): sleep, timeout, wait,
gather, shield, threads, Event, Semaphore and run, with asyncio's semantics.

Every coroutine is driven with a backstop (conftest ``drive``). Deadlines under test are
short and only ever passed, never measured: a busy machine makes them late, not wrong.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.loop.futures import CancelledError, Future, Task, current_task, wrap_concurrent
from tests.helpers import wait_until
from tests.loop.conftest import drive


def live_timers(loop: Loop) -> int:
    """Timers that would still wake the loop (cancelled ones are dropped unrun), drive's
    backstop included: compare counts."""
    return sum(1 for t in loop._timers if not t.cancelled)


def me() -> Task[object]:
    task = current_task()
    assert task is not None
    return task


async def forever(loop: Loop) -> None:
    await Future(loop)


# ---------------------------------------------------------------- sleep


def test_sleep_returns_its_result_after_the_delay(loop: Loop) -> None:
    async def main() -> tuple[str, str, float]:
        timers = live_timers(loop)
        began = loop.time()
        slept = await tools.sleep(0.02, "later")
        assert live_timers(loop) == timers
        return await tools.sleep(0, "now"), slept, loop.time() - began

    now, later, took = drive(loop, main())
    assert (now, later) == ("now", "later")
    assert took >= 0.02


def test_a_cancelled_sleep_cancels_its_timer(loop: Loop) -> None:
    async def main() -> None:
        timers = live_timers(loop)
        task: Task[None] = loop.create_task(tools.sleep(3600))
        await tools.sleep(0)
        assert live_timers(loop) == timers + 1
        task.cancel()
        await tools.wait([task])
        assert task.cancelled()
        # Nothing left that would wake an idle loop in an hour.
        assert live_timers(loop) == timers

    drive(loop, main())


# ---------------------------------------------------------------- timeout


def test_timeout_expiring_raises_timeout_error(loop: Loop) -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with tools.timeout(0.01) as t:
                await forever(loop)
        assert t.expired()
        assert me().cancelling() == 0  # its own cancellation was taken back
        await tools.sleep(0)  # and does not come back later

    drive(loop, main())


def test_a_block_finishing_in_time_is_left_alone(loop: Loop) -> None:
    async def main() -> str:
        timers = live_timers(loop)
        async with tools.timeout(3600) as t:
            await tools.sleep(0)
        assert not t.expired()
        assert live_timers(loop) == timers
        # No turn of the loop inside (however busy the machine, the deadline cannot pass
        # in the block), then past the deadline: nothing cancels us any more.
        async with tools.timeout(0.02):
            pass
        await tools.sleep(0.05)
        return "done"

    assert drive(loop, main()) == "done"


def test_an_outer_cancel_during_a_timeout_stays_cancelled_error(loop: Loop) -> None:
    async def guarded() -> None:
        async with tools.timeout(3600):
            await forever(loop)

    async def main() -> None:
        task = loop.create_task(guarded())
        await tools.sleep(0)
        task.cancel()
        await tools.wait([task])
        assert task.cancelled()

    drive(loop, main())


def test_an_outer_cancel_as_the_timeout_expires_stays_cancelled_error(loop: Loop) -> None:
    # The deadline and somebody else's cancel in the same iteration: two requests, only
    # one of them the timeout's, so the task ends cancelled, not timed out.
    async def guarded() -> None:
        async with tools.timeout(0):
            loop.call_soon(me().cancel)
            await forever(loop)

    async def main() -> None:
        task = loop.create_task(guarded())
        await tools.wait([task])
        assert task.cancelled()

    drive(loop, main())


def test_nested_timeouts_the_inner_expiring(loop: Loop) -> None:
    async def main() -> str:
        async with tools.timeout(3600) as outer:
            with pytest.raises(TimeoutError):
                async with tools.timeout(0.01) as inner:
                    await forever(loop)
            assert inner.expired()
            await tools.sleep(0)
        assert not outer.expired()
        return "went on"

    assert drive(loop, main()) == "went on"


def test_nested_timeouts_the_outer_expiring(loop: Loop) -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with tools.timeout(0.01) as outer, tools.timeout(3600) as inner:
                await forever(loop)
        assert outer.expired()
        assert not inner.expired()

    drive(loop, main())


def test_reschedule_moves_the_deadline(loop: Loop) -> None:
    async def main() -> None:
        async with tools.timeout(None) as t:
            assert t.when() is None
            t.reschedule(None)
            await tools.sleep(0)
        with pytest.raises(TimeoutError):
            async with tools.timeout(None) as t:
                t.reschedule(loop.time() + 0.01)
                await forever(loop)
        async with tools.timeout(0.01) as t:
            t.reschedule(None)  # disarmed
            await tools.sleep(0.03)
        assert not t.expired()
        async with tools.timeout(0.01) as t:
            t.reschedule(loop.time() + 3600)  # moved away
            await tools.sleep(0.03)
        assert not t.expired()

    drive(loop, main())


def test_timeout_outside_a_task_is_an_error(loop: Loop) -> None:
    async def enter() -> None:
        async with tools.timeout(1):
            pass

    coro = enter()
    with pytest.raises(RuntimeError):
        coro.send(None)
    coro.close()


# ---------------------------------------------------------------- wait


def test_wait_all_completed(loop: Loop) -> None:
    a: Future[int] = Future(loop)
    b: Future[int] = Future(loop)

    async def main() -> None:
        loop.call_soon(a.set_result, 1)
        loop.call_later(0.01, b.set_result, 2)
        done, pending = await tools.wait([a, b])
        assert done == {a, b} and pending == set()

    drive(loop, main())


def test_wait_first_completed(loop: Loop) -> None:
    a: Future[int] = Future(loop)
    b: Future[int] = Future(loop)

    async def main() -> None:
        loop.call_soon(b.set_exception, ValueError("first"))
        done, pending = await tools.wait([a, b], return_when=tools.FIRST_COMPLETED)
        assert done == {b} and pending == {a}
        assert not a.cancelled()  # wait cancels nothing

    drive(loop, main())


def test_wait_timeout_returns_the_pending_ones_uncancelled(loop: Loop) -> None:
    a: Future[int] = Future(loop)
    b: Future[int] = Future(loop)
    b.set_result(2)

    async def main() -> None:
        timers = live_timers(loop)
        done, pending = await tools.wait([a, b], timeout=0.01)
        assert done == {b} and pending == {a}
        assert not a.done()
        assert live_timers(loop) == timers

    drive(loop, main())


def test_wait_on_futures_already_done_returns_in_the_same_step(loop: Loop) -> None:
    a: Future[int] = Future(loop)
    b: Future[int] = Future(loop)
    a.set_result(1)

    async def main() -> None:
        other: Task[None] = loop.create_task(tools.sleep(0))
        done, pending = await tools.wait([a, b], return_when=tools.FIRST_COMPLETED)
        assert done == {a} and pending == {b}
        done, pending = await tools.wait([a])
        assert done == {a} and not pending
        assert not other.done()  # no turn was given away
        with pytest.raises(ValueError):
            await tools.wait([])

    drive(loop, main())


# ---------------------------------------------------------------- gather


def test_gather_keeps_the_order_of_its_arguments(loop: Loop) -> None:
    async def after(delay: float, value: str) -> str:
        await tools.sleep(delay)
        return value

    async def main() -> list[object]:
        ready: Future[str] = Future(loop)
        ready.set_result("future")
        assert await tools.gather() == []
        return await tools.gather(after(0.02, "slow"), after(0, "fast"), ready)

    assert drive(loop, main()) == ["slow", "fast", "future"]


def test_gather_raises_the_first_exception_and_the_others_go_on(loop: Loop) -> None:
    async def fails() -> None:
        raise ValueError("first")

    async def waits(f: Future[str]) -> str:
        return await f

    async def main() -> None:
        later: Future[str] = Future(loop)
        slow = loop.create_task(waits(later))
        with pytest.raises(ValueError, match="first"):
            await tools.gather(slow, fails())
        assert not slow.done()
        later.set_result("slow")
        assert await slow == "slow"

    drive(loop, main())


def test_gather_return_exceptions(loop: Loop) -> None:
    async def fails() -> None:
        raise ValueError("kept")

    async def main() -> list[object]:
        cancelled = loop.create_task(forever(loop))
        cancelled.cancel()
        return await tools.gather(fails(), tools.sleep(0, 1), cancelled, return_exceptions=True)

    got = drive(loop, main())
    assert isinstance(got[0], ValueError) and got[1] == 1
    assert isinstance(got[2], CancelledError)


def test_a_cancelled_child_raises_cancelled_error_without_cancelling_the_others(
    loop: Loop,
) -> None:
    async def main() -> None:
        doomed = loop.create_task(forever(loop))
        sibling = loop.create_task(tools.sleep(0.01, "sibling"))
        loop.call_soon(doomed.cancel)
        with pytest.raises(CancelledError):
            await tools.gather(doomed, sibling)
        assert not me().cancelling()  # the child's cancellation, not ours
        assert await sibling == "sibling"

    drive(loop, main())


def test_cancelling_the_gatherer_cancels_the_children_and_waits_for_them(loop: Loop) -> None:
    cleaned: list[str] = []

    async def child(name: str) -> None:
        try:
            await forever(loop)
        finally:
            await tools.sleep(0)  # cleanup that takes turns of the loop
            cleaned.append(name)

    async def gatherer() -> None:
        try:
            await tools.gather(child("a"), child("b"))
        except CancelledError:
            # As asyncio's gather: it ends once its children have (their cleanup ran).
            cleaned.append("gatherer")
            raise

    async def main() -> None:
        task = loop.create_task(gatherer())
        await tools.sleep(0)
        await tools.sleep(0)
        task.cancel()
        await tools.wait([task])
        assert task.cancelled()

    drive(loop, main())
    assert sorted(cleaned[:2]) == ["a", "b"] and cleaned[2:] == ["gatherer"]


# ---------------------------------------------------------------- shield


def test_cancelling_a_shield_leaves_the_inner_running(loop: Loop) -> None:
    async def shielded(inner: Task[str]) -> str:
        return await tools.shield(inner)

    async def waits(f: Future[str]) -> str:
        return await f

    async def main() -> None:
        later: Future[str] = Future(loop)
        inner = loop.create_task(waits(later))
        waiter = loop.create_task(shielded(inner))
        await tools.sleep(0)
        await tools.sleep(0)
        waiter.cancel()
        await tools.wait([waiter])
        assert waiter.cancelled()
        assert not inner.done()  # still running
        later.set_result("inner")
        assert await inner == "inner"

        failing: Future[int] = Future(loop)
        loop.call_soon(failing.set_exception, ValueError("through"))
        with pytest.raises(ValueError, match="through"):
            await tools.shield(failing)
        assert tools.shield(failing) is failing  # done: nothing to shield

    drive(loop, main())


# ---------------------------------------------------------------- threads


def test_to_thread_result_and_exception(loop: Loop) -> None:
    def where(x: int) -> tuple[int, str]:
        return x, threading.current_thread().name

    def fails() -> None:
        raise OSError("in the thread")

    async def main() -> None:
        value, name = await tools.to_thread(where, 3)
        assert value == 3 and name != threading.current_thread().name
        with pytest.raises(OSError, match="in the thread"):
            await tools.to_thread(fails)
        with pytest.raises(OSError, match="in the thread"):
            await get_running_loop().run_in_executor(None, fails)

    drive(loop, main())


def test_a_loop_closed_before_its_thread_finishes_does_not_raise_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = Loop()
    started = threading.Event()
    release = threading.Event()

    def slow() -> str:
        started.set()
        release.wait(30)
        return "late"

    pool = ThreadPoolExecutor(max_workers=1)
    try:
        future = loop.run_in_executor(pool, slow)

        async def until_started() -> None:
            while not started.is_set():
                await tools.sleep(0.001)

        drive(loop, until_started())
        loop.close()
        with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
            release.set()
            pool.shutdown(wait=True)  # the thread's done callbacks have run
        assert caplog.records == []  # "exception calling callback" otherwise
        assert not future.done()  # nobody waits on a closed loop
    finally:
        release.set()
        pool.shutdown(wait=True)
        loop.close()


def test_cancelling_a_thread_wait_leaves_the_call_running(loop: Loop) -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(30)
        finished.set()

    async def main() -> None:
        task: Task[None] = loop.create_task(tools.to_thread(slow))
        while not started.is_set():
            await tools.sleep(0.001)
        task.cancel()
        await tools.wait([task])
        assert task.cancelled()
        assert not finished.is_set()  # a call under way is not stopped
        release.set()

    try:
        drive(loop, main())
        wait_until(finished.is_set, 10.0, message="the call to end after its waiter left")
    finally:
        release.set()


def test_a_call_cancelled_before_it_ran_cancels_its_future(loop: Loop) -> None:
    release = threading.Event()
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(release.wait, 30)  # the only worker is busy: the next call queues

        async def main() -> None:
            queued = pool.submit(int, "1")
            ours = wrap_concurrent(queued, loop)
            assert queued.cancel()
            with pytest.raises(CancelledError):
                await ours

        drive(loop, main())
    finally:
        release.set()
        pool.shutdown(wait=True)


# ---------------------------------------------------------------- Event


def test_event_set_before_and_after_wait_and_clear(loop: Loop) -> None:
    event = tools.Event()

    async def waiter(name: str, woke: list[str]) -> None:
        await event.wait()
        woke.append(name)

    async def main() -> None:
        event.set()
        assert await event.wait() is True  # already set: at once
        event.clear()
        assert not event.is_set()
        woke: list[str] = []
        tasks = [loop.create_task(waiter(n, woke)) for n in ("a", "b", "c")]
        await tools.sleep(0)
        await tools.sleep(0)
        assert woke == []  # cleared: they wait
        event.set()
        await tools.wait(tasks)
        assert woke == ["a", "b", "c"]

    drive(loop, main())


def test_a_cancelled_event_waiter_leaves_the_others_waiting(loop: Loop) -> None:
    event = tools.Event()

    async def main() -> None:
        gone = loop.create_task(event.wait())
        stays = loop.create_task(event.wait())
        await tools.sleep(0)
        gone.cancel()
        await tools.wait([gone])
        assert gone.cancelled() and not stays.done()
        assert len(event._waiters) == 1  # the cancelled wait left nothing behind
        event.set()
        assert await stays is True

    drive(loop, main())


# ---------------------------------------------------------------- Semaphore


def test_semaphore_limits_holders_and_serves_waiters_in_arrival_order(loop: Loop) -> None:
    sem = tools.Semaphore(2)
    holding: list[str] = []
    order: list[str] = []
    most = [0]

    async def user(name: str) -> None:
        async with sem:
            order.append(name)
            holding.append(name)
            most[0] = max(most[0], len(holding))
            await tools.sleep(0)
            await tools.sleep(0)
            holding.remove(name)

    async def main() -> None:
        await tools.gather(*(user(n) for n in "abcdef"))

    drive(loop, main())
    assert most[0] == 2
    assert order == list("abcdef")
    assert not sem.locked()
    with pytest.raises(ValueError):
        tools.Semaphore(-1)


def test_a_woken_waiter_cancelled_before_it_runs_passes_its_unit_on(loop: Loop) -> None:
    sem = tools.Semaphore(1)
    got: list[str] = []

    async def user(name: str) -> None:
        async with sem:
            got.append(name)
            await tools.sleep(0)

    async def main() -> None:
        await sem.acquire()
        woken = loop.create_task(user("woken"))
        later = loop.create_task(user("later"))
        await tools.sleep(0)
        assert sem.locked()
        # Its unit handed over, then cancelled in the same step: before it runs.
        sem.release()
        woken.cancel()
        await tools.wait([woken, later])
        assert woken.cancelled()
        assert got == ["later"]
        assert not sem.locked()  # no unit lost

    drive(loop, main())


def test_a_woken_waiter_cancelled_with_nobody_behind_gives_its_unit_back(loop: Loop) -> None:
    sem = tools.Semaphore(1)

    async def main() -> None:
        await sem.acquire()
        woken = loop.create_task(sem.acquire())
        await tools.sleep(0)
        sem.release()
        woken.cancel()
        await tools.wait([woken])
        assert woken.cancelled()
        assert not sem.locked()
        # A later acquirer gets in at once.
        async with tools.timeout(5):
            await sem.acquire()
        assert sem.locked()

    drive(loop, main())


# ---------------------------------------------------------------- run


def test_run_returns_the_result_and_closes_its_loop() -> None:
    seen: list[Loop] = []

    async def main() -> int:
        seen.append(get_running_loop())
        await tools.sleep(0)
        return 5

    assert tools.run(main()) == 5
    assert seen[0].is_closed()

    async def fails() -> None:
        seen.append(get_running_loop())
        raise ValueError("out")

    with pytest.raises(ValueError, match="out"):
        tools.run(fails())
    assert seen[1].is_closed()
    with pytest.raises(RuntimeError):
        get_running_loop()


def test_run_on_a_given_loop_leaves_it_open(loop: Loop) -> None:
    async def main() -> Loop:
        return get_running_loop()

    assert tools.run(main(), loop) is loop
    assert not loop.is_closed()


def test_run_on_a_given_loop_ends_the_tasks_left_running_there(loop: Loop) -> None:
    """As asyncio's Runner: the supervisor's main returning with a worker still running
    (a join that timed out) must not leave it suspended, its cleanup never run."""
    ended: list[str] = []

    async def worker() -> None:
        try:
            await tools.sleep(3600)
        finally:
            ended.append("worker")

    async def main() -> None:
        get_running_loop().create_task(worker())
        await tools.sleep(0)

    tools.run(main(), loop)
    assert ended == ["worker"]
    assert not loop.is_closed()


def test_run_cancels_the_tasks_left_running_and_lets_them_end() -> None:
    ended: list[str] = []

    async def left(name: str) -> None:
        try:
            await tools.sleep(3600)
        finally:
            await tools.sleep(0)  # cleanup that needs the loop
            ended.append(name)

    async def main(fail: bool) -> None:
        get_running_loop().create_task(left("a" if not fail else "c"))
        get_running_loop().create_task(left("b" if not fail else "d"))
        await tools.sleep(0)
        if fail:
            raise ValueError("main failed")

    tools.run(main(False))
    assert sorted(ended) == ["a", "b"]
    with pytest.raises(ValueError, match="main failed"):
        tools.run(main(True))
    assert sorted(ended) == ["a", "b", "c", "d"]
