"""A million jobs written and recovered intact; prints how long each took.

How fast recovery must be is benchmarks/server.py --durable's business (against beanstalkd
recovering the same jobs in the same run). Run alone:
``pytest tests/server/binlog/test_bench.py -m slow -s``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import Binlog, BinlogOptions, JobRecord, StoredState

N_JOBS = 1_000_000


@pytest.mark.slow
def test_recovery_of_a_million_jobs(tmp_path: Path) -> None:
    body = b"payload-" * 8  # 64 bytes, a typical small job
    opts = BinlogOptions(fsync_ms=None)
    started = time.perf_counter()
    with Binlog(str(tmp_path), opts) as log:
        put, update = log.put, log.update
        for jid in range(1, N_JOBS + 1):
            rec = JobRecord(jid, b"default", body, 1024, 60, 0, StoredState.READY, 1.7e9, 0.0)
            put(rec)
            if jid % 10 == 0:  # some jobs were released/buried along the way
                update(rec._replace(state=StoredState.BURIED, buries=1, reserves=1))
    append_s = time.perf_counter() - started
    size = sum(p.stat().st_size for p in tmp_path.glob("binlog.*"))

    started = time.perf_counter()
    with Binlog(str(tmp_path), opts) as log:
        recovery_s = time.perf_counter() - started
        jobs = log.recovery.jobs
        assert len(jobs) == N_JOBS and log.recovery.next_id == N_JOBS + 1
        assert jobs[10].state is StoredState.BURIED and jobs[11].state is StoredState.READY
        assert log.recovery.clean
    records = N_JOBS + N_JOBS // 10
    print(
        f"\nbinlog: appended {records} records ({size / 1e6:.0f} MB) in {append_s:.2f}s "
        f"({records / append_s:,.0f} records/s, no fsync); "
        f"recovered {N_JOBS:,} jobs in {recovery_s:.2f}s"
    )
