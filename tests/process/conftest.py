"""Fixtures of the process-layer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cmdstalk_py.process import set_child_subreaper


@pytest.fixture(scope="module")
def subreaper() -> Iterator[None]:
    """Adopt orphaned grandchildren, as the supervisor does, so they can be reaped.

    Without it they go to this container's init, which may never reap them, and a test
    that checks for zombies would blame run_command for init's behaviour. A module asks
    for it with ``pytestmark = pytest.mark.usefixtures("subreaper")``.
    """
    assert set_child_subreaper(True)
    try:
        yield
    finally:
        set_child_subreaper(False)
