"""Attacks on a real ``cmdstalk --http`` (issue #27): whatever its clients do, the jobs keep
starting and none fails. The attackers are their own processes
(``benchmarks/dashboard_attackers.py``); jobs flow one after another throughout, each
checked as it finishes. How much the attacks slow a job's start is measured, not asserted:
``benchmarks/dashboard_attack.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import greenstalk
import psutil

from cmdstalk_py.ops.dashboard.admission import MAX_CONNECTIONS
from tests.dashboard.supervised import TOKEN, get, supervised
from tests.helpers import BeanstalkServer, wait_until

ATTACKERS = Path(__file__).parents[2] / "benchmarks" / "dashboard_attackers.py"
NOFILE = 128  # the supervisor's descriptor limit (a unit without LimitNOFILE= has 1024)
IDLE_SOCKETS = 300  # more than NOFILE, as ~1,100 were against 1024 in the issue
POLLERS = 500
JOBS = 20  # jobs run while the attack is at full strength


class Attacker:
    """An attacker process; ``ready`` once it is at full strength."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ATTACKERS), *args], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    @property
    def ready(self) -> bool:
        return "ready" in self.lines

    def stop(self) -> dict[str, int]:
        """End the attack: what it saw (answers by status, refusals)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        wait_until(lambda: self.lines and self.lines[-1].startswith("{"), timeout=10,
                   message="the attacker's summary")  # fmt: skip
        return json.loads(self.lines[-1])  # type: ignore[no-any-return]


@contextmanager
def attacking(*args: str) -> Iterator[Attacker]:
    attacker = Attacker(*args)
    try:
        yield attacker
    finally:
        if attacker.proc.poll() is None:
            attacker.proc.kill()
            attacker.proc.wait(timeout=10)


class JobFlow:
    """Jobs put one after another, each once the one before finished; every finished one
    is checked at once: deleted, never released (a spawn that failed is released)."""

    def __init__(self, client: greenstalk.Client[Any], events: Path) -> None:
        self.client, self.events = client, events
        self.put = 0

    def finished(self) -> list[dict[str, Any]]:
        text = self.events.read_text() if self.events.exists() else ""
        return [json.loads(line) for line in text.split("\n")[:-1]]  # whole lines only

    def step(self) -> int:
        """Check what finished, put the next job if none is under way; how many finished."""
        records = self.finished()
        failed = [r for r in records if r["outcome"] != "deleted" or r["releases"]]
        assert not failed, [(r["outcome"], r["error"]) for r in failed[:3]]
        if len(records) == self.put:
            self.client.put("quick")
            self.put += 1
        return len(records)


class Sampled:
    """The supervisor's descriptors and threads, at most, over the samples taken."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.fds = self.threads = 0

    def sample(self) -> None:
        self.fds = max(self.fds, self.process.num_fds())
        self.threads = max(self.threads, self.process.num_threads())


def _run_jobs_through(attacker: Attacker, flow: JobFlow, sampled: Sampled) -> None:
    """Jobs flow while the attack gains strength, then JOBS more at full strength."""

    def at_full_strength() -> bool:
        flow.step()
        sampled.sample()
        return attacker.ready

    wait_until(at_full_strength, timeout=90, interval=0.02, message="the attack")
    done = flow.step()

    def jobs_done() -> bool:
        sampled.sample()
        return flow.step() >= done + JOBS

    wait_until(jobs_done, timeout=90, interval=0.02, message=f"{JOBS} jobs during the attack")


def test_idle_sockets_leave_descriptors_for_jobs(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    with supervised(real_beanstalkd, tmp_path, TOKEN, "--events", str(events),
                    nofile=NOFILE) as sup:  # fmt: skip
        flow = JobFlow(real_beanstalkd.client(use="work"), events)
        wait_until(lambda: flow.step() >= 1, timeout=30, message="a first job")
        sampled = Sampled(sup.proc.pid)
        sampled.sample()
        before = sampled.fds
        with attacking("idle", "127.0.0.1", str(sup.port), str(IDLE_SOCKETS)) as attacker:
            _run_jobs_through(attacker, flow, sampled)
            seen = attacker.stop()
        assert seen.get("connected") == IDLE_SOCKETS  # each accepted, or refused once taken
        # The dashboard held its cap at most, however many waited.
        assert sampled.fds <= before + MAX_CONNECTIONS + 16, (before, sampled.fds)
        # Once they are gone, the page is served again.
        wait_until(lambda: get(sup.url + "api/running")[0] == 200, timeout=60,
                   message="the dashboard after the attack")  # fmt: skip


def test_a_polling_flood_leaves_jobs_alone(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    with supervised(real_beanstalkd, tmp_path, TOKEN, "--events", str(events),
                    nofile=1024) as sup:  # fmt: skip
        flow = JobFlow(real_beanstalkd.client(use="work"), events)
        wait_until(lambda: flow.step() >= 1, timeout=30, message="a first job")
        sampled = Sampled(sup.proc.pid)
        sampled.sample()
        before = (sampled.fds, sampled.threads)
        with attacking("flood", sup.url + "api/state", str(POLLERS)) as attacker:
            _run_jobs_through(attacker, flow, sampled)
            seen = attacker.stop()
        assert seen.get("200", 0) > 0  # some were served all along: the page kept working
        assert seen.get("503", 0) + seen.get("closed", 0) > 0  # the rest were turned away
        # A connection per poller would be a descriptor (and, before, a thread) each.
        assert sampled.fds <= before[0] + MAX_CONNECTIONS + 16, (before, sampled.fds)
        assert sampled.threads <= before[1] + 4, (before, sampled.threads)
