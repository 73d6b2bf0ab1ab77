"""``Observers``: the fan-out every broker hook goes through."""

from __future__ import annotations

import logging

import pytest

from cmdstalk_py.ops.observers import Observer, Observers


class Counting(Observer):
    def __init__(self) -> None:
        self.busy: list[tuple[str, int, bool]] = []

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        self.busy.append((tube, slot, busy))


class Broken(Observer):
    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        raise RuntimeError("exporter down")


def test_hooks_reach_observers_that_implement_them_even_after_one_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, last = Counting(), Counting()
    observers = Observers([first, Observer(), Broken()])
    observers.add(last)
    with caplog.at_level(logging.ERROR, logger="cmdstalk"):
        observers.broker_busy("mail", 1, True)
    assert first.busy == last.busy == [("mail", 1, True)]
    assert "failed in broker_busy" in caplog.text and "Broken" in caplog.text
    observers.heartbeat()  # nobody implements it: nothing happens, nothing raises


def test_an_observer_hook_set_on_the_instance_counts_too() -> None:
    seen: list[str] = []
    plain = Observer()
    plain.ready = lambda: seen.append("ready")  # type: ignore[method-assign]
    nested = Observers([Counting()])
    observers = Observers([plain, nested])
    observers.ready()
    observers.broker_busy("t", 0, False)
    assert seen == ["ready"]
    assert nested._observers[0].busy == [("t", 0, False)]  # type: ignore[attr-defined]


def test_nested_observers_listen_only_for_what_someone_behind_them_implements() -> None:
    # The supervisor puts its own observer beside the one it is given, often an Observers.
    inner = Observers([Observer()])
    outer = Observers([Counting(), inner])
    assert outer.listens("broker_busy") and not outer.listens("job_output")
    inner.add(Counting())  # added later, as the CLI adds its dashboard
    assert not outer.listens("job_output")
    seen: list[bytes] = []

    class Output(Observer):
        def job_output(self, tube: str, slot: int, job_id: int, stream: str, line: bytes) -> None:
            seen.append(line)

    inner.add(Output())
    assert outer.listens("job_output")
    outer.job_output("mail", 0, 1, "stdout", b"hi")
    assert seen == [b"hi"]
