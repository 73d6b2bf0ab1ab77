"""Helpers for supervisor tests: an in-process supervisor on a thread, a result collector,
a standalone broker, and a real ``cmdstalk`` subprocess with an event log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.lifecycle import Supervisor
from cmdstalk_py.supervisor.results import JobResult, Outcome
from tests.helpers import BeanstalkServer, wait_until

REPO = Path(__file__).resolve().parents[2]


class Collector(Observer):
    """Records every hook call; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.results: list[JobResult] = []
        self.kills: list[tuple[str, str]] = []
        self.reconnects: list[tuple[str, str]] = []
        self.busy: list[tuple[str, int, bool]] = []
        self.waits: list[tuple[str, float]] = []
        self.ready_calls = 0
        self.stopping_calls = 0
        self.heartbeats = 0
        self.closed = False

    def job_finished(self, result: JobResult) -> None:
        with self._lock:
            self.results.append(result)

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        with self._lock:
            self.busy.append((tube, slot, busy))

    def reserve_waited(self, tube: str, seconds: float) -> None:
        with self._lock:
            self.waits.append((tube, seconds))

    def heartbeat(self) -> None:
        self.heartbeats += 1

    def process_killed(self, tube: str, signal_name: str) -> None:
        with self._lock:
            self.kills.append((tube, signal_name))

    def reconnected(self, where: str, address: str) -> None:
        with self._lock:
            self.reconnects.append((where, address))

    def ready(self) -> None:
        self.ready_calls += 1

    def stopping(self) -> None:
        self.stopping_calls += 1

    def close(self) -> None:
        self.closed = True

    def snapshot(self) -> list[JobResult]:
        with self._lock:
            return list(self.results)

    def busy_now(self) -> int:
        """How many brokers are running a command right now.

        Wait on this, not on the server's reserved count, before stopping: a broker whose
        reserve the server has answered but which has not read the reply yet is still in
        reserve, and a stop then abandons that job unrun (the server takes it back).
        """
        state: dict[tuple[str, int], bool] = {}
        with self._lock:
            for tube, slot, busy in self.busy:
                state[tube, slot] = busy
        return sum(state.values())

    def wait_results(self, n: int, timeout: float = 15.0) -> list[JobResult]:
        """Wait until at least ``n`` results arrived; return them all."""
        wait_until(lambda: len(self.snapshot()) >= n, timeout, message=f"{n} job results")
        return self.snapshot()

    def for_job(self, job_id: int) -> list[JobResult]:
        return [r for r in self.snapshot() if r.job_id == job_id]

    def wait_outcome(self, job_id: int, outcome: Outcome, timeout: float = 15.0) -> JobResult:
        def found() -> JobResult | None:
            return next((r for r in self.for_job(job_id) if r.outcome is outcome), None)

        result = wait_until(found, timeout, message=f"job {job_id} {outcome.value}")
        assert result is not None
        return result


def config_for(server: BeanstalkServer, cmd: str, **overrides: Any) -> Config:
    return Config(cmd=cmd, host=server.host, port=server.port, **overrides)


@dataclass
class Running:
    supervisor: Supervisor
    collector: Collector
    thread: threading.Thread


@contextmanager
def supervising(server: BeanstalkServer, cmd: str, **overrides: Any) -> Iterator[Running]:
    """A Supervisor on a thread (no signal handlers); stopped hard in ``finally``."""
    collector = Collector()
    sup = Supervisor(config_for(server, cmd, **overrides), collector)
    thread = threading.Thread(target=sup.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        yield Running(sup, collector, thread)
    finally:
        sup.request_stop()
        sup.request_stop()  # the second request kills whatever still runs
        thread.join(20)
        assert not thread.is_alive(), "supervisor did not stop"


def run_one(broker: Broker, timeout: float = 15.0) -> JobResult:
    """Call ``broker.run_once()`` until it handles a job."""
    result = wait_until(broker.run_once, timeout, interval=0, message="a job for the broker")
    assert result is not None
    return result


def cmdstalk_env(**extra: str) -> dict[str, str]:
    """Environment for a ``cmdstalk`` subprocess: no CMDSTALK_* leaking in from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMDSTALK_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def start_cmdstalk(*args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """Start the real ``cmdstalk`` (``python -m cmdstalk_py``) as a subprocess."""
    popen.setdefault("env", cmdstalk_env())
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "cmdstalk_py", *args], **popen)


def read_events(path: Path) -> list[dict[str, Any]]:
    """The event log's records so far (complete lines only)."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]
    return [json.loads(line) for line in lines]
