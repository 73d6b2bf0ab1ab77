"""Futures and tasks on the project's loop (loop/futures.py): the asyncio semantics the
supervisor's code relies on, results, exceptions, cancellation and who is running.

Each coroutine is driven with a backstop (conftest ``drive``); the order of events is
asserted, never a duration.
"""

from __future__ import annotations

from typing import Any

import pytest

from cmdstalk_py.loop import tools
from cmdstalk_py.loop.core import Loop, get_running_loop
from cmdstalk_py.loop.futures import (
    CancelledError,
    Future,
    InvalidStateError,
    Task,
    current_task,
    ensure_future,
)
from tests.loop.conftest import drive

# ---------------------------------------------------------------- Future


def test_future_result_and_exception_and_their_states(loop: Loop) -> None:
    f: Future[int] = Future(loop)
    assert not f.done()
    with pytest.raises(InvalidStateError):
        f.result()
    with pytest.raises(InvalidStateError):
        f.exception()
    f.set_result(7)
    assert f.done() and not f.cancelled()
    assert f.result() == 7 and f.exception() is None
    with pytest.raises(InvalidStateError):
        f.set_result(8)
    with pytest.raises(InvalidStateError):
        f.set_exception(ValueError())
    assert not f.cancel()  # done: too late
    assert f.result() == 7

    g: Future[int] = Future(loop)
    g.set_exception(ValueError)  # a class is instantiated
    assert isinstance(g.exception(), ValueError)
    with pytest.raises(ValueError):
        g.result()

    h: Future[int] = Future(loop)
    with pytest.raises(TypeError):
        h.set_exception(StopIteration())
    assert not h.done()


def test_cancelled_future_raises_cancelled_error(loop: Loop) -> None:
    f: Future[int] = Future(loop)
    assert f.cancel()
    assert f.done() and f.cancelled()
    assert not f.cancel()
    with pytest.raises(CancelledError):
        f.result()
    with pytest.raises(CancelledError):
        f.exception()
    assert not issubclass(CancelledError, Exception)  # ``except Exception`` lets it through


def test_done_callbacks_run_in_a_later_iteration_never_inside_set_result(loop: Loop) -> None:
    seen: list[tuple[str, int]] = []
    f: Future[int] = Future(loop)
    f.add_done_callback(lambda d: seen.append(("first", d.result())))
    f.add_done_callback(lambda d: seen.append(("second", d.result())))
    f.set_result(3)
    assert seen == []
    loop.run_once(block=False)
    assert seen == [("first", 3), ("second", 3)]


def test_a_callback_added_to_a_done_future_is_scheduled_not_called(loop: Loop) -> None:
    seen: list[Future[int]] = []
    f: Future[int] = Future(loop)
    f.cancel()
    f.add_done_callback(seen.append)
    assert seen == []
    loop.run_once(block=False)
    assert seen == [f]


def test_remove_done_callback_forgets_every_registration(loop: Loop) -> None:
    seen: list[str] = []

    def kept(_f: Future[int]) -> None:
        seen.append("kept")

    def removed(_f: Future[int]) -> None:
        seen.append("removed")

    f: Future[int] = Future(loop)
    f.add_done_callback(removed)
    f.add_done_callback(kept)
    f.add_done_callback(removed)
    assert f.remove_done_callback(removed) == 2
    assert f.remove_done_callback(removed) == 0
    f.set_exception(RuntimeError("x"))
    loop.run_once(block=False)
    assert seen == ["kept"]


# ---------------------------------------------------------------- Task: outcome


def test_task_returns_its_coroutine_value(loop: Loop) -> None:
    async def inner(x: int) -> int:
        return x * 2

    async def outer() -> int:
        # Nested awaits of coroutines run inside the same task, no extra step.
        return await inner(await inner(5)) + 1

    task = loop.create_task(outer(), name="outer")
    assert task.get_name() == "outer"
    assert drive(loop, task) == 21
    assert task.done() and task.result() == 21


def test_task_exception_is_kept_on_the_task_and_the_loop_goes_on(
    loop: Loop, capfd: pytest.CaptureFixture[str]
) -> None:
    async def fails() -> None:
        raise ValueError("kept")

    async def main() -> str:
        task = loop.create_task(fails())
        await tools.wait([task])
        assert isinstance(task.exception(), ValueError)
        return "went on"

    assert drive(loop, main()) == "went on"
    assert capfd.readouterr().err == ""  # kept on the task, not reported by the loop


def test_keyboard_interrupt_propagates_out_of_run_until_complete(loop: Loop) -> None:
    # Raised in a task nobody waits for: it still ends the run, as asyncio's does.
    async def interrupted() -> None:
        await tools.sleep(0)
        raise KeyboardInterrupt

    children: list[Task[None]] = []

    async def main() -> None:
        children.append(loop.create_task(interrupted()))
        await Future(loop)

    with pytest.raises(KeyboardInterrupt):
        drive(loop, main())
    assert isinstance(children[0].exception(), KeyboardInterrupt)
    assert not loop.is_running()
    with pytest.raises(RuntimeError):
        get_running_loop()


# ---------------------------------------------------------------- Task: cancellation


def test_cancel_while_waiting_raises_at_the_await_and_the_task_can_go_on(loop: Loop) -> None:
    waited: Future[int] = Future(loop)
    steps: list[str] = []

    async def patient() -> str:
        try:
            await waited
        except CancelledError:
            steps.append("cancelled at the await")
        await tools.sleep(0)
        return "went on"

    async def main() -> None:
        task = loop.create_task(patient())
        await tools.sleep(0)  # the task now waits for ``waited``
        assert task.cancel()
        assert task.cancelling() == 1
        assert await task == "went on"
        assert not task.cancelled()

    drive(loop, main())
    assert steps == ["cancelled at the await"]
    assert waited.cancelled()  # cancelling the task cancelled what it waited for


def test_cancel_before_the_first_step_never_runs_the_coroutine(loop: Loop) -> None:
    ran: list[str] = []

    async def never() -> None:
        ran.append("ran")

    async def main() -> None:
        task = loop.create_task(never())
        assert task.cancel()
        assert task.cancel()  # still pending: counted again
        assert task.cancelling() == 2
        await tools.wait([task])
        assert task.cancelled()
        with pytest.raises(CancelledError):
            task.result()

    drive(loop, main())
    assert ran == []


def test_cancel_when_its_waiter_just_finished_still_cancels(loop: Loop) -> None:
    # The waiter is done and the task's wake-up queued when cancel() comes: the waiter
    # cannot be cancelled any more, so the task must throw CancelledError in itself.
    waited: Future[int] = Future(loop)
    seen: list[str] = []

    async def patient() -> None:
        try:
            await waited
            seen.append("got the result")
        except CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        task = loop.create_task(patient())
        await tools.sleep(0)
        waited.set_result(1)
        assert task.cancel()
        await tools.wait([task])
        assert task.cancelled()

    drive(loop, main())
    assert seen == ["cancelled"]
    assert waited.result() == 1


def test_a_task_cancelled_during_its_last_step_is_cancelled(loop: Loop) -> None:
    async def cancels_itself() -> int:
        me = current_task()
        assert me is not None
        me.cancel()
        return 1  # never awaited again: no await to raise at

    task = loop.create_task(cancels_itself())
    with pytest.raises(CancelledError):
        drive(loop, task)
    assert task.cancelled()


def test_cancelled_while_awaiting_a_bare_yield(loop: Loop) -> None:
    async def spins() -> None:
        while True:
            await tools.sleep(0)

    async def main() -> None:
        task = loop.create_task(spins())
        await tools.sleep(0)
        task.cancel()  # not waiting on a future: cancelled at its next step
        await tools.wait([task])
        assert task.cancelled()

    drive(loop, main())


def test_uncancel_takes_requests_back(loop: Loop) -> None:
    async def main() -> None:
        me = current_task()
        assert me is not None and me.cancelling() == 0
        assert me.uncancel() == 0  # never below zero
        me.cancel()
        me.cancel()
        assert me.cancelling() == 2
        with pytest.raises(CancelledError):
            await tools.sleep(0)
        assert me.uncancel() == 1
        assert me.uncancel() == 0

    drive(loop, main())


def test_cancelling_a_task_that_awaits_another_cancels_both(loop: Loop) -> None:
    inner_saw: list[str] = []

    async def inner() -> None:
        try:
            await Future(loop)
        except CancelledError:
            inner_saw.append("cancelled")
            raise

    async def outer(child: Task[None]) -> None:
        await child

    async def main() -> None:
        child = loop.create_task(inner())
        parent = loop.create_task(outer(child))
        await tools.sleep(0)
        await tools.sleep(0)
        assert parent.cancel()
        await tools.wait([parent])
        assert parent.cancelled()
        assert child.cancelled()

    drive(loop, main())
    assert inner_saw == ["cancelled"]


def test_a_task_awaiting_a_task_cancelled_by_someone_else_is_not_cancelling(loop: Loop) -> None:
    # How a waiter tells "what I awaited was cancelled" from "I am being cancelled"
    # (client/connection.py's stop() cancels the connection attempt it awaits).
    async def awaits(child: Task[None]) -> int:
        try:
            await child
        except CancelledError:
            me = current_task()
            assert me is not None
            return me.cancelling()
        return -1

    async def main() -> None:
        child = loop.create_task(forever())
        parent = loop.create_task(awaits(child))
        await tools.sleep(0)
        child.cancel()
        assert await parent == 0

    async def forever() -> None:
        await Future(loop)

    drive(loop, main())


# ---------------------------------------------------------------- who is running


def test_current_task_inside_and_outside(loop: Loop) -> None:
    assert current_task() is None
    seen: list[object] = []

    async def main() -> None:
        seen.append(current_task())
        loop.call_soon(lambda: seen.append(current_task()))  # a callback: no task
        await tools.sleep(0)
        seen.append(current_task())

    task = loop.create_task(main())
    drive(loop, task)
    assert seen == [task, None, task]
    assert current_task() is None


def test_get_running_loop_inside_outside_and_after(loop: Loop) -> None:
    with pytest.raises(RuntimeError):
        get_running_loop()

    async def main() -> Loop:
        return get_running_loop()

    assert drive(loop, main()) is loop
    with pytest.raises(RuntimeError):
        get_running_loop()


def test_a_bare_sleep_zero_lets_another_task_run_in_between(loop: Loop) -> None:
    order: list[str] = []

    async def a() -> None:
        order.append("a1")
        await tools.sleep(0)
        order.append("a2")

    async def b() -> None:
        order.append("b")

    async def main() -> None:
        await tools.gather(a(), b())

    drive(loop, main())
    assert order == ["a1", "b", "a2"]


# ---------------------------------------------------------------- errors


def test_awaiting_a_future_of_another_loop_raises_at_the_await(loop: Loop) -> None:
    other = Loop()
    try:
        foreign: Future[int] = Future(other)

        async def main() -> str:
            try:
                await foreign
            except RuntimeError as e:
                return str(e)
            return "no error"

        assert "another loop" in drive(loop, main())
        assert not foreign.done()
    finally:
        other.close()


def test_ensure_future_keeps_a_future_and_wraps_a_coroutine(loop: Loop) -> None:
    f: Future[int] = Future(loop)
    assert ensure_future(f) is f

    async def seven() -> int:
        return 7

    task = ensure_future(seven(), loop)
    assert isinstance(task, Task)
    assert drive(loop, task) == 7


def test_awaiting_something_that_is_not_a_future_raises_in_the_task(loop: Loop) -> None:
    class Odd:
        def __await__(self) -> Any:
            yield "not a future"

    async def main() -> str:
        try:
            await Odd()
        except RuntimeError as e:
            return str(e)
        return "no error"

    assert "cannot wait for" in drive(loop, main())


def test_a_tracked_loop_knows_its_unfinished_tasks(loop: Loop) -> None:
    async def waits(f: Future[int]) -> int:
        return await f

    untracked = loop.create_task(waits(Future(loop)))
    unfinished: set[Task[Any]] = set()
    loop.unfinished = unfinished
    try:
        f: Future[int] = Future(loop)
        g: Future[int] = Future(loop)
        pending = loop.create_task(waits(f))
        never_stepped = loop.create_task(waits(f))
        failing = loop.create_task(waits(g))
        assert unfinished == {pending, never_stepped, failing}
        never_stepped.cancel()
        loop.run_once(block=False)
        assert unfinished == {pending, failing}
        g.set_exception(ValueError())
        f.set_result(1)
        drive(loop, pending)
        assert failing.done()
        assert unfinished == set()
        assert not untracked.done()  # started before: never listed
    finally:
        loop.unfinished = None
    after = loop.create_task(waits(Future(loop)))
    assert after not in unfinished
    after.cancel()
    loop.run_once(block=False)  # its coroutine is closed, not left never awaited
