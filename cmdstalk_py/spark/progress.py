"""Progress on the terminal for long Spark runs: step lines, and stage progress polled from
Spark's status tracker in a background thread (only for stages that run a while).

On a cluster the same thread notices a stage that waits with no executor at all: Spark
only logs that (a warning our quiet log level hides), and the run would seem to hang."""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Progress:
    """``with Progress(spark) as p: p.step("reading")``; stage lines appear by themselves."""

    def __init__(
        self,
        spark: SparkSession | None,
        stream: TextIO | None = None,
        interval: float = 1.0,
        quiet_for: float = 2.0,
        no_executors_after: float = 15.0,
    ) -> None:
        self.spark = spark
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.quiet_for = quiet_for  # a stage is reported only once it has run this long
        self.no_executors_after = no_executors_after
        self._warned_no_executors = False
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.spark is not None:
            self._thread = threading.Thread(target=self._poll, name="spark-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def step(self, message: str) -> None:
        """Print ``[elapsed] message``."""
        with self._lock:
            elapsed = time.monotonic() - self.started
            self.stream.write(f"[{elapsed:7.1f}s] {message}\n")
            self.stream.flush()

    def _poll(self) -> None:
        assert self.spark is not None
        tracker = self.spark.sparkContext.statusTracker()
        first_seen: dict[int, float] = {}
        last_shown: dict[int, tuple[int, int]] = {}
        while not self._stop.wait(self.interval):
            try:
                stage_ids = tracker.getActiveStageIds()
                now = time.monotonic()
                for sid in stage_ids:
                    first_seen.setdefault(sid, now)
                    info = tracker.getStageInfo(sid)
                    if info is None or now - first_seen[sid] < self.quiet_for:
                        continue
                    if now - first_seen[sid] >= self.no_executors_after:
                        self._check_executors(info.numActiveTasks + info.numCompletedTasks)
                    state = (info.numCompletedTasks, info.numActiveTasks)
                    if last_shown.get(sid) != state:
                        last_shown[sid] = state
                        self.step(
                            f"  stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks "
                            f"done, {info.numActiveTasks} running"
                        )
            except Exception:  # the session stopped under us: nothing left to report
                return

    def _check_executors(self, tasks_started: int) -> None:
        assert self.spark is not None
        sc = self.spark.sparkContext
        if self._warned_no_executors or tasks_started or str(sc.master).startswith("local"):
            return
        if executor_count(self.spark) == 0:
            self._warned_no_executors = True
            self.step(
                f"warning: no executor after {self.no_executors_after:.0f}s: the cluster at "
                f"{sc.master} has granted none (are workers up, with free cores and memory? "
                "see spark.cores.max, spark.executor.memory, spark.executor.cores)"
            )


def executor_count(spark: SparkSession) -> int:
    """Executors registered with the driver (the driver itself not counted)."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    return max(0, int(status.size()) - 1)
