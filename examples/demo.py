#!/usr/bin/env python3
"""Quick-start demo: the bundled server, the example workers and the supervisor, end to end.

Starts the bundled beanstalkd-compatible server in this process on a free port, puts the
example jobs (one tube per worker in ``examples/workers/``), runs the cmdstalk supervisor
with ``--all`` until every job is done (deleted, or buried for the ones that cannot
succeed), then prints what happened to each job. Equivalent to::

    cmdstalk --embedded --address 127.0.0.1:11300 --all --per-tube 2 \\
        --bury-exit-codes 65 --cmd 'exec examples/workers/"$CMDSTALK_TUBE"'

(the tube names the worker; a demo trick, not a deployment pattern).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import greenstalk  # noqa: E402

from cmdstalk_py.ops.logsetup import configure_logging  # noqa: E402
from cmdstalk_py.ops.observers import Observer  # noqa: E402
from cmdstalk_py.server.embedded import EmbeddedServer  # noqa: E402
from cmdstalk_py.supervisor.config import Config  # noqa: E402
from cmdstalk_py.supervisor.lifecycle import Supervisor  # noqa: E402
from cmdstalk_py.supervisor.results import JobResult, Outcome  # noqa: E402

WORKERS = ROOT / "examples" / "workers"
# (tube = worker file, payload, ttr, what should become of it)
JOBS = [
    ("hello.sh", b"Alice", 30, Outcome.DELETED),
    ("hello.sh", b"Bob", 30, Outcome.DELETED),
    ("flaky.py", b"order-17", 30, Outcome.DELETED),
    ("json_worker.py", b'{"numbers": [1, 2, 3.5]}', 30, Outcome.DELETED),
    ("json_worker.py", b"this is not json", 30, Outcome.BURIED),
    ("slow.sh", b"big report", 2, Outcome.TIMEOUT_BURIED),
]
FINAL = {
    Outcome.DELETED,
    Outcome.BURIED,
    Outcome.TIMEOUT_BURIED,
    Outcome.PRECHECK_BURIED,
}
DEADLINE = 25.0


class Results(Observer):
    """Collects every job result; ``done`` is set once each expected job is final."""

    def __init__(self, job_ids: set[int]) -> None:
        self.results: list[JobResult] = []
        self._waiting = set(job_ids)
        self._lock = threading.Lock()
        self.done = threading.Event()

    def job_finished(self, result: JobResult) -> None:
        with self._lock:
            self.results.append(result)
            if result.outcome in FINAL:
                self._waiting.discard(result.job_id)
            if not self._waiting:
                self.done.set()


def describe(r: JobResult) -> str:
    if r.exit_code is not None:
        return f"exit {r.exit_code}"
    if r.signal is not None:
        import signal

        return signal.Signals(r.signal).name
    return "-"


def first_line(r: JobResult) -> str:
    text = (r.stdout_tail or r.stderr_tail).strip().splitlines()
    return text[0][:60] if text else ""


def main() -> int:
    configure_logging("text", "INFO")
    # The supervisor's --cmd picks the worker by tube name; brokers hand their environment,
    # including this variable, to every job.
    os.environ["DEMO_WORKERS"] = str(WORKERS)
    with EmbeddedServer("127.0.0.1", 0) as server:
        host, port = server.address
        expected: dict[int, tuple[str, Outcome]] = {}
        with greenstalk.Client((host, port), encoding=None) as producer:
            for tube, payload, ttr, outcome in JOBS:
                producer.use(tube)
                job_id = producer.put(payload, ttr=ttr)
                expected[job_id] = (tube, outcome)
        print(f"put {len(expected)} jobs on the bundled server at {host}:{port}\n", flush=True)

        results = Results(set(expected))
        config = Config(
            cmd='exec "$DEMO_WORKERS/$CMDSTALK_TUBE"',
            host=host,
            port=port,
            all_tubes=True,
            per_tube=2,
            discover_interval=0.2,
            bury_exit_codes=frozenset({65}),
        )
        supervisor = Supervisor(config, results)
        started = time.monotonic()
        thread = threading.Thread(target=supervisor.run, kwargs={"install_signals": False})
        thread.start()
        finished = results.done.wait(DEADLINE)
        supervisor.request_stop()
        if not finished:
            supervisor.request_stop()  # a second stop kills what still runs, releases its job
        thread.join()
        elapsed = time.monotonic() - started

    print(f"\n{'job':>4}  {'worker':<15} {'outcome':<15} {'exit':<8} {'ms':>7}  output")
    for r in results.results:
        print(
            f"{r.job_id:>4}  {r.tube:<15} {r.outcome.value:<15} {describe(r):<8} "
            f"{r.duration_ms:>7.0f}  {first_line(r)}"
        )
    last = {r.job_id: r.outcome for r in results.results}
    wrong = {
        job_id: (want.value, last[job_id].value if job_id in last else None)
        for job_id, (_, want) in expected.items()
        if last.get(job_id) is not want
    }
    print(f"\n{len(results.results)} runs of {len(expected)} jobs in {elapsed:.1f}s")
    if not finished or wrong:
        print(f"unexpected outcomes (job: wanted, got): {wrong}", file=sys.stderr)
        return 1
    print("every job ended as expected: the failing one retried, the bad payload and the "
          "TTR overrun buried")
    return 0


if __name__ == "__main__":
    sys.exit(main())
