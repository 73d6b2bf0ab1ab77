"""The event loop the server and the supervisor share (loop/core.py): timers, callbacks,
descriptors, wake-ups, signals.

Real descriptors and real signals; every wait is bounded (a blocking poll that never
returns would hang the test, so the loop runs on a thread or with a timer as a backstop).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading

import pytest

from cmdstalk_py.loop.core import MAX_POLL, Loop
from tests.helpers import wait_until


def test_timers_run_in_deadline_order_and_cancelled_ones_never(loop: Loop) -> None:
    ran: list[str] = []
    now = loop.time()
    loop.call_at(now + 0.03, ran.append, "c")
    loop.call_at(now + 0.01, ran.append, "a")
    cancelled = loop.call_at(now + 0.02, ran.append, "never")
    loop.call_later(0.02, ran.append, "b")
    loop.call_at(now + 0.04, loop.stop)
    cancelled.cancel()
    loop.run_forever()
    assert ran == ["a", "b", "c"]
    assert loop.time() >= now + 0.04  # the poll waited for the deadline, not less


def test_call_soon_runs_in_order_and_queued_from_a_callback_waits_an_iteration(
    loop: Loop,
) -> None:
    ran: list[str] = []

    def first() -> None:
        ran.append("first")
        loop.call_soon(ran.append, "later")

    loop.call_soon(first)
    loop.call_soon(ran.append, "second")
    loop.run_once(block=False)
    assert ran == ["first", "second"]
    loop.run_once(block=False)
    assert ran == ["first", "second", "later"]


def test_watched_descriptor_gets_its_event_mask_then_after_events(loop: Loop) -> None:
    a, b = socket.socketpair()
    seen: list[tuple[str, int]] = []
    try:
        loop.watch(a.fileno(), select.EPOLLIN, lambda mask: seen.append(("io", mask)))
        loop.after_events = lambda: seen.append(("after", 0))
        loop.run_once(block=False)
        assert seen == []  # nothing readable, no batch
        b.send(b"x")
        loop.run_once(block=False)
        assert seen == [("io", select.EPOLLIN), ("after", 0)]
        loop.modify(a.fileno(), select.EPOLLOUT)
        loop.run_once(block=False)
        assert seen[-2] == ("io", select.EPOLLOUT)
        loop.unwatch(a.fileno())
        loop.unwatch(a.fileno())  # twice, or never watched: ignored
        seen.clear()
        loop.run_once(block=False)
        assert seen == []
    finally:
        a.close()
        b.close()


def test_a_failing_handler_does_not_end_the_loop(
    loop: Loop, capfd: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    loop.call_soon(boom)
    loop.call_soon(ran.append, "after boom")
    loop.call_later(0.0, boom)
    loop.run_once(block=False)
    assert ran == ["after boom"]
    err = capfd.readouterr().err
    assert err.count("RuntimeError: boom") == 2
    assert "cmdstalk-server: error in the event loop" in err


def test_call_soon_threadsafe_wakes_a_blocked_poll(loop: Loop) -> None:
    stopped = threading.Event()
    # Backstop: a timer far away, so a missed wake-up fails the test instead of hanging it.
    loop.call_later(10.0, loop.stop)

    def run() -> None:
        loop.run_forever()
        stopped.set()

    thread = threading.Thread(target=run, daemon=True)
    started = loop.time()
    thread.start()
    loop.call_soon_threadsafe(loop.stop)
    wait_until(stopped.is_set, 5.0, message="the loop to wake for call_soon_threadsafe")
    thread.join(5.0)
    assert loop.time() - started < 5.0


def test_signal_runs_its_callback_on_the_loop_and_close_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    loop = Loop()
    got: list[str] = []
    try:

        def on_usr2() -> None:
            got.append("usr2")
            loop.stop()

        loop.add_signal_handler(signal.SIGUSR2, on_usr2)
        loop.call_later(10.0, loop.stop)  # backstop
        # Delivered to this (main) thread while the loop blocks in its poll.
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR2))
        timer.start()
        started = loop.time()
        loop.run_forever()
        timer.join()
        assert got == ["usr2"]
        assert loop.time() - started < 5.0
    finally:
        loop.close()
    assert signal.getsignal(signal.SIGUSR2) == before


def test_a_far_timer_does_not_overflow_the_poll(loop: Loop) -> None:
    # A job may be delayed 2**32 s; epoll takes a C int of milliseconds.
    ran: list[int] = []
    loop.call_later(2.0**32, ran.append, 1)
    # The far timer is the next deadline when the loop blocks; another thread wakes it.
    waker = threading.Timer(0.05, loop.call_soon_threadsafe, (loop.stop,))
    waker.start()
    loop.run_forever()
    waker.join()
    assert ran == []
    assert MAX_POLL * 1000 < 2**31


def test_close_is_idempotent_and_frees_descriptors() -> None:
    loop = Loop()
    epoll_fd = loop.epoll.fileno()
    loop.close()
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon_threadsafe(print)  # would never run: another thread must not wait
    assert loop.epoll.closed
    with pytest.raises(OSError):
        os.fstat(epoll_fd)


def test_cancelled_timers_do_not_pile_up_in_the_heap() -> None:
    """A watchdog armed and cancelled per request, far in the future: the heap is rebuilt
    without the cancelled ones instead of holding one per request for the whole delay."""
    loop = Loop()
    try:
        kept = loop.call_later(3600, lambda: None)
        for _ in range(10_000):
            loop.call_later(3600, lambda: None).cancel()
        assert len(loop._timers) <= 2 * 64 + 2
        assert not kept.cancelled and kept in loop._timers
        fired: list[int] = []
        loop.call_later(0, fired.append, 1)
        loop.call_later(0, loop.stop)
        loop.run_forever()
        assert fired == [1]
    finally:
        loop.close()


def test_a_timer_cancelled_by_a_due_timer_does_not_run() -> None:
    loop = Loop()
    try:
        ran: list[str] = []
        later = [loop.call_later(0, ran.append, f"x{i}") for i in range(200)]

        def cancel_all() -> None:
            for timer in later:
                timer.cancel()  # past half the heap: rebuilt while timers are being run

        loop.call_at(loop.time() - 1, cancel_all)  # due first
        loop.call_later(0.01, loop.stop)
        loop.run_forever()
        assert ran == []
    finally:
        loop.close()
