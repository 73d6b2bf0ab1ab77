"""The shipped supervisord.conf under the real supervisord: jobs processed, a stop with jobs
in flight loses none, a start processes the rest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import BeanstalkServer, accepts_connections, free_port, wait_until
from tests.ops.procs import stop_process
from tests.ops.units import SUPERVISORD_CONF, VENV_BIN

JOBS = 9
TUBE = "drill"


class Supervisord:
    """supervisord in the foreground on a copy of the shipped config, and supervisorctl."""

    def __init__(self, var: Path, env: dict[str, str]) -> None:
        self.conf = var / "supervisord.conf"
        shutil.copy(SUPERVISORD_CONF, self.conf)
        self.env = env
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "supervisord"), "-n", "-c", str(self.conf)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def ctl(self, *args: str, timeout: float = 60) -> str:
        out = subprocess.run(
            [str(VENV_BIN / "supervisorctl"), "-c", str(self.conf), *args],
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        return out.stdout + out.stderr

    def state(self, program: str) -> str:
        words = self.ctl("status", program).split()
        return words[1] if len(words) > 1 and words[0] == program else "?"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.ctl("shutdown")
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_process(self.proc)


@pytest.fixture
def var_dir() -> Iterator[Path]:
    # supervisord's unix socket path must fit in 108 bytes: keep it short.
    with tempfile.TemporaryDirectory(prefix="sv") as d:
        yield Path(d)


def job_log(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()]  # type: ignore[misc]


@pytest.mark.slow
def test_stop_with_jobs_in_flight_loses_none(
    real_beanstalkd: BeanstalkServer, var_dir: Path
) -> None:
    log = var_dir / "jobs.log"
    server_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMDSTALK_")} | {
        "CMDSTALK_BIN": str(VENV_BIN),
        "CMDSTALK_VAR": str(var_dir),
        "CMDSTALK_ADDRESS": real_beanstalkd.address,
        "CMDSTALK_SERVER_PORT": str(server_port),
        "CMDSTALK_TUBES": TUBE,
        "CMDSTALK_PER_TUBE": "3",
        # Quotes, spaces and $: cmdstalk takes the command from the environment verbatim.
        "CMDSTALK_CMD": f'p=$(cat); echo "start $p" >> {log}; sleep 2; echo "done $p" >> {log}',
    }
    producer = real_beanstalkd.client(use=TUBE)
    stats = real_beanstalkd.client()
    sv = Supervisord(var_dir, env)
    try:
        wait_until(lambda: sv.state("cmdstalk") == "RUNNING", timeout=60, message="RUNNING")
        # The bundled server's program runs too, on its own port (the workers use beanstalkd).
        wait_until(lambda: sv.state("cmdstalk-server") == "RUNNING", timeout=60,
                   message="cmdstalk-server RUNNING")  # fmt: skip
        assert accepts_connections("127.0.0.1", server_port)
        for i in range(JOBS):
            producer.put(f"job{i}".encode(), ttr=60)

        def in_flight() -> set[str]:
            entries = job_log(log)
            return {p for e, p in entries if e == "start"} - {p for e, p in entries if e == "done"}

        wait_until(lambda: sum(e == "done" for e, _ in job_log(log)) >= 3, timeout=60,
                   message="first jobs done")  # fmt: skip
        running = wait_until(in_flight, timeout=30, message="jobs in flight")
        out = sv.ctl("stop", "cmdstalk", timeout=120)
        assert "stopped" in out, out
        assert sv.state("cmdstalk") == "STOPPED"

        entries = job_log(log)
        done = [p for e, p in entries if e == "done"]
        tube = stats.stats_tube(TUBE)
        # Nothing lost, nothing left reserved or buried: every job is done or back in ready.
        assert tube["current-jobs-reserved"] == 0 and tube["current-jobs-buried"] == 0
        assert len(done) == len(set(done))
        assert len(done) + tube["current-jobs-ready"] == JOBS, (done, tube)
        # The jobs in flight at the stop were let finish (they take 2 s, far inside the TTR).
        assert running <= set(done), (running, done)
        assert len(done) < JOBS  # the stop really came before the queue was drained

        wait_until(lambda: "started" in sv.ctl("start", "cmdstalk"), timeout=60,
                   message="cmdstalk started again")  # fmt: skip
        wait_until(lambda: sum(e == "done" for e, _ in job_log(log)) == JOBS, timeout=60,
                   message="all jobs done after the restart")  # fmt: skip
        wait_until(lambda: stats.stats_tube(TUBE)["total-jobs"] == JOBS
                   and stats.stats_tube(TUBE)["current-jobs-ready"] == 0
                   and stats.stats_tube(TUBE)["current-jobs-reserved"] == 0,
                   timeout=30, message="tube drained")  # fmt: skip
        entries, every_job = job_log(log), Counter(f"job{i}" for i in range(JOBS))
        assert Counter(p for e, p in entries if e == "done") == every_job
        # Exactly once: no job was killed and run again.
        assert Counter(p for e, p in entries if e == "start") == every_job
        events = var_dir / "events.jsonl"
        # The event line follows the delete: the tube may be empty a moment before it is written.
        wait_until(lambda: len(events.read_text().splitlines()) >= JOBS, timeout=30,
                   message="an event per job")  # fmt: skip
        records = [json.loads(line) for line in events.read_text().splitlines()]
        assert Counter(r["outcome"] for r in records) == {"deleted": JOBS}
        assert "INFO" in (var_dir / "cmdstalk.log").read_text()  # output captured by supervisord
    finally:
        sv.close()
