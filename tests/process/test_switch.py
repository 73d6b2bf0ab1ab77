"""Switch: the loop-owned flag behind stop / stop_now (pure, no loop needed)."""

from __future__ import annotations

from cmdstalk_py.process import Switch


def test_set_calls_each_callback_once_and_later_ones_at_once() -> None:
    switch = Switch()
    calls: list[str] = []
    first, removed = (lambda: calls.append("first")), (lambda: calls.append("removed"))
    switch.add_callback(first)
    switch.add_callback(removed)
    switch.remove_callback(removed)
    switch.remove_callback(removed)  # absent: no error
    assert not switch.is_set() and calls == []
    switch.set()
    switch.set()  # idempotent
    assert switch.is_set() and calls == ["first"]
    switch.add_callback(lambda: calls.append("late"))
    assert calls == ["first", "late"]
