"""Limits benchmark (issue #29): what accounting and limits cost, and the overshoot.

Three figures, each against a reference measured in the same run:

- ``rate``: ``run_command`` of ``bash -c 'cat >/dev/null'`` with a 1-byte payload in a
  plain loop (the process layer alone), batches alternating between no limit, all three
  limits sampled from /proc, and all three in a cgroup per run (where this process may
  manage cgroups: ``process/cgroup.py``); prints the rates and each ratio to no limit. Run
  it with ``PYTHONPATH`` at another tree to get that tree's rate without limits
  (``--no-limits-only``), alternating the two trees.
- ``cpu``: N commands that sleep, run at once with all three limits, and the same without:
  the supervisor's CPU (every thread) per running job per second of sampling.
- ``overshoot``: a command allocating 50 MB every 100 ms under ``--max-memory 500M``: the
  peak memory above the limit, per run, sampled from /proc and (where it can) in a cgroup.

Usage: ``python benchmarks/limits.py [rate|cpu|overshoot] [--jobs N] [--no-limits-only]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from cmdstalk_py.loop.tools import gather, run
from cmdstalk_py.process import run_command

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
CAT = ["/bin/bash", "-c", "cat >/dev/null"]


def _limits() -> object:
    from cmdstalk_py.process.usage import Limits

    return Limits(memory=1 << 30, cpu=60.0, procs=100)


def _via(mode: str) -> bool:
    """Limits by ``mode`` (``proc``, ``cgroup``) from now on; False if this process
    cannot manage a cgroup."""
    from cmdstalk_py.process import cgroup

    try:
        cgroup.configure(mode)
    except cgroup.Unusable:
        return False
    return True


async def _batch(n: int, limited: bool) -> float:
    kw = {"limits": _limits()} if limited else {}
    start = time.perf_counter()
    for _ in range(n):
        result = await run_command(CAT, b"x", ENV, **kw)  # type: ignore[arg-type]
        assert result.exit_code == 0
    return n / (time.perf_counter() - start)


def rate(jobs: int, rounds: int, no_limits_only: bool) -> None:
    rates: dict[str, list[float]] = {"no limit": [], "limits via proc": [], "limits via cgroup": []}
    for _ in range(rounds):
        rates["no limit"].append(run(_batch(jobs, False)))
        if no_limits_only:
            continue
        for mode in ("proc", "cgroup"):
            if _via(mode):
                rates[f"limits via {mode}"].append(run(_batch(jobs, True)))
    plain = rates["no limit"]
    for name, got in rates.items():
        if not got:
            continue
        line = f"{name}: {statistics.median(got):.0f} runs/s (batches {[round(r) for r in got]})"
        if got is not plain:
            ratio = statistics.median(b / a for a, b in zip(plain, got, strict=True))
            line += f"; paired ratio to no limit {ratio:.3f}"
        print(line)


async def _sleepers(n: int, seconds: float, limited: bool) -> float:
    kw = {"limits": _limits()} if limited else {}
    before = os.times()
    argv = ["/bin/sleep", str(seconds)]
    await gather(*(run_command(argv, b"", ENV, **kw) for _ in range(n)))  # type: ignore[arg-type]
    after = os.times()
    return (after.user + after.system) - (before.user + before.system)


def cpu(jobs: int, seconds: float) -> None:
    plain = run(_sleepers(jobs, seconds, False))
    print(f"{jobs} sleepers x {seconds:.0f} s: CPU {plain:.3f} s without limits")
    for mode in ("proc", "cgroup"):
        if not _via(mode):
            continue
        limited = run(_sleepers(jobs, seconds, True))
        per = (limited - plain) / (jobs * seconds)
        print(f"  via {mode}: {limited:.3f} s: {per * 1000:.2f} ms per running job per second")
    print(f"host processes now: {sum(1 for n in os.listdir('/proc') if n.isdigit())}")


ALLOCATE = (
    "import time\nheld = []\nwhile True:\n"
    "    held.append(bytearray(50 << 20))\n    time.sleep(0.1)\n"
)


def overshoot(runs: int) -> None:
    from cmdstalk_py.process.usage import Limits

    limit = 500 << 20
    for mode in ("proc", "cgroup"):
        if not _via(mode):
            print(f"via {mode}: this process may not manage a cgroup")
            continue
        over: list[float] = []
        for _ in range(runs):
            argv = [sys.executable, "-c", ALLOCATE]
            result = run(run_command(argv, b"", ENV, limits=Limits(memory=limit)))
            assert result.usage.peak_memory is not None
            over.append((result.usage.peak_memory - limit) / (1 << 20))
        print(f"via {mode}: --max-memory 500M, 50 MB per 100 ms: overshoot MB "
              f"{[round(o) for o in over]}, median {statistics.median(over):.0f}, "
              f"max {max(over):.0f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("rate", "cpu", "overshoot"))
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--no-limits-only", action="store_true")
    args = parser.parse_args()
    if args.what == "rate":
        rate(args.jobs, args.rounds, args.no_limits_only)
    elif args.what == "cpu":
        cpu(args.jobs, args.seconds)
    else:
        overshoot(args.rounds)


if __name__ == "__main__":
    main()
