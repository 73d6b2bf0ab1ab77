"""Power cuts at random moments under a random load, restart after restart.

With ``fsync_ms=0`` every state the caller saw a successful ``tick``/``sync`` for must
survive, and what comes back is exactly the state after some prefix of the records
appended: never a state that did not exist, never one older than the last sync.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from cmdstalk_py.server.binlog import Binlog, BinlogOptions
from tests.server.binlog.faults import Crash, FaultyOps
from tests.server.binlog.model import Model


@pytest.mark.parametrize("seed", range(int(os.environ.get("BINLOG_POWERLOSS_SEEDS", "12"))))
def test_power_cuts_keep_a_prefix_at_or_after_the_last_sync(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    opts = BinlogOptions(
        fsync_ms=0, segment_size=rng.choice([1024, 3000]), compact_budget=2,
        preallocate=rng.choice([0, 0, 512, 4096]),
    )  # fmt: skip
    model = Model()
    now = 0.0
    acked = 0
    for cycle in range(6):
        ops = FaultyOps(str(tmp_path))
        log = Binlog(str(tmp_path), opts, ops=ops, lookup=model.lookup)
        if cycle:
            # The state after the previous cut is one of those it was allowed to be.
            recovered = log.recovery.jobs
            allowed = model.history[acked:]
            assert recovered in allowed, f"cycle {cycle}: not a prefix at/after the sync"
            assert log.recovery.next_id >= model.next_history[acked]
            model = Model(recovered, log.recovery.next_id)
            log.lookup = model.lookup
        acked = 0
        ops.crash_at = ops.steps + rng.randint(1, 300)
        try:
            while True:
                model.step(log, rng, put_weight=rng.choice([0.4, 0.6]))
                if rng.random() < 0.4:
                    now += 0.01
                    log.tick(now)
                    acked = len(model.history) - 1
        except Crash:
            pass
        ops.kill()
        ops.power_cut(rng)
    with Binlog(str(tmp_path), opts) as log:
        assert log.recovery.jobs in model.history[acked:]
