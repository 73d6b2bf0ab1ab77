"""Where the dashboard runs: on an asyncio loop it is given (the supervisor's, once it has
one), or on its own loop in one thread; either way it closes without leaving anything."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from cmdstalk_py.ops.dashboard import Dashboard, start_dashboard
from cmdstalk_py.ops.dashboard.board import Board
from tests.dashboard.supervised import get


def _dashboard(loop: asyncio.AbstractEventLoop | None) -> Dashboard:
    def connections() -> list[dict[str, Any]]:
        return []

    return start_dashboard("127.0.0.1:0", Board(), lambda: [], lambda server: [], lambda: None,
                           None, connections, loop=loop)  # fmt: skip


def _dashboard_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "cmdstalk-dashboard"]


def test_on_a_loop_it_is_given() -> None:
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, name="the-callers-loop", daemon=True)
    runner.start()
    try:
        dashboard = _dashboard(loop)
        assert _dashboard_threads() == []  # no loop of its own
        status, state = get(dashboard.url + "api/state")
        assert status == 200 and state["running"] == [] and state["supervisor"]["servers"] == []
        asyncio.run_coroutine_threadsafe(dashboard.aclose(), loop).result(timeout=10)
        dashboard.close()  # the synchronous close may follow: nothing left to do twice
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(timeout=10)
    assert not [t for t in asyncio.all_tasks(loop) if not t.done()]
    loop.close()


def test_on_a_loop_of_its_own() -> None:
    before = _dashboard_threads()
    dashboard = _dashboard(None)
    assert len(_dashboard_threads()) == len(before) + 1
    assert get(dashboard.url)[0] == 200
    dashboard.close()
    assert _dashboard_threads() == before and dashboard.loop.is_closed()
