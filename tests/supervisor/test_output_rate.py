"""``--output-rate``: a job's output lines are logged at that rate at most (ten seconds'
worth at once); the rest are counted and said to be dropped, not split or logged. A
command flooding its output must cost the supervisor little, or every other job would wait
for the GIL behind the one broker logging it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import stop_process
from tests.supervisor.conftest import start_cmdstalk

# "flood": 2,000,000 lines, then "done flood"; anything else: "done <what>".
FLOOD_CMD = (
    'read -r what; [ "$what" = flood ] && yes "flood line" | head -n 2000000; echo "done $what"'
)
# N lines numbered 1..N (N = the payload).
LINES_CMD = "read -r n; seq 1 $n"


def run_jobs(
    beanstalk: BeanstalkServer, tmp_path: Path, cmd: str, bodies: list[bytes], *flags: str
) -> tuple[list[int], str]:
    """Run ``bodies`` as jobs of a fresh tube with ``flags``; their ids and the log."""
    tube = f"rate{len(list(tmp_path.iterdir()))}"  # one tube and one log per call
    client = beanstalk.client(use=tube)
    ids = [client.put(body, ttr=120) for body in bodies]
    log = tmp_path / f"{tube}.stderr"
    with log.open("wb") as err:
        proc = start_cmdstalk(
            "--address", beanstalk.address, "--tubes", tube, *flags, "--cmd", cmd,
            stderr=err, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        wait_until(lambda: client.stats_tube(tube)["cmd-delete"] == len(ids), 120,
                   message="every job deleted")  # fmt: skip
    finally:
        stop_process(proc, timeout=20)
    return ids, log.read_text()


def dropped(log: str, job_id: int, rate: int) -> list[int]:
    pattern = rf"job {job_id} output over {rate} lines/s: (\d+) lines? not logged"
    return [int(n) for n in re.findall(pattern, log)]


@pytest.mark.slow
def test_a_flooding_job_logs_at_its_rate_and_the_others_still_log_theirs(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    bodies = [b"flood", *(f"q{i}".encode() for i in range(20))]
    (flood, *quick), log = run_jobs(
        beanstalk, tmp_path, FLOOD_CMD, bodies, "--workers", "2", "--output-rate", "100"
    )
    logged = log.count(f"job {flood} stdout: ")
    # Before: every one of the 2,000,001 lines went through logging (the other jobs'
    # commands waited for the GIL meanwhile). Now 10 s worth at once, then 100 a second.
    assert 1000 <= logged < 20_000
    drops = dropped(log, flood, 100)
    assert drops and logged + sum(drops) == 2_000_001  # every line logged or counted
    for job_id, body in zip(quick, bodies[1:], strict=True):
        assert f"job {job_id} stdout: done {body.decode()}" in log
        assert not dropped(log, job_id, 100)


def test_lines_over_the_rate_are_counted_and_zero_means_no_limit(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    (limited,), log = run_jobs(beanstalk, tmp_path, LINES_CMD, [b"3000"], "--output-rate", "10")
    # 100 at once (10 s at 10 a second), a few more as the bucket refills meanwhile.
    assert log.count(f"job {limited} stdout: 1\n") == 1
    logged = log.count(f"job {limited} stdout: ")
    assert 100 <= logged < 200
    assert logged + sum(dropped(log, limited, 10)) == 3000

    (free,), log = run_jobs(beanstalk, tmp_path, LINES_CMD, [b"3000"], "--output-rate", "0")
    assert log.count(f"job {free} stdout: ") == 3000
    assert "not logged" not in log
