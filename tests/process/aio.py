"""Waiting on the loop in process tests: poll a condition with a deadline, yielding to the
loop between looks (so the runs under test go on)."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from cmdstalk_py.loop.tools import run as run_loop
from cmdstalk_py.loop.tools import sleep
from cmdstalk_py.process import ProcessResult, run_command
from tests.helpers import WaitTimeout

T = TypeVar("T")


async def until(predicate: Callable[[], T], timeout: float = 10.0, message: str = "condition") -> T:
    """Await until ``predicate()`` is truthy; return it. WaitTimeout after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {message}")
        await sleep(0.005)
    return value


def open_fds() -> set[str]:
    """This process's descriptors, once garbage is collected: a closed loop keeps its wake
    pipe's write end until it is dropped (``core.Loop.close``), and a finished run's objects
    hold their loop in reference cycles until the collector frees them."""
    gc.collect()
    return set(os.listdir("/proc/self/fd"))


def run(*args: Any, **kwargs: Any) -> ProcessResult:
    """``run_command`` on a loop of its own (``tools.run``), for one command at a time."""
    return run_loop(run_command(*args, **kwargs))
