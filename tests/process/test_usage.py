"""What a command's tree used, and its limits (issue #29): real processes, real /proc.

Bounds are asserted in bytes and CPU seconds against the stated mechanism (one sample
interval, plus the scan and ``SCAN_WAIT``), with generous margins; never in wall time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psutil
import pytest

from cmdstalk_py.process import KillReason
from cmdstalk_py.process.usage import (
    ACCOUNT_INTERVAL,
    NO_LIMITS,
    Limits,
    Sampler,
    Stat,
    parse_stat,
    read_table,
    tree,
)
from tests.helpers import wait_until
from tests.process.aio import run

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
MB = 1 << 20
PY = sys.executable
# Allocates (and touches) 20 MB every 100 ms, forever: 200 MB/s at most, slower when the
# machine is busy (the sleeps only stretch).
ALLOCATE = (
    "import time\nheld = []\nwhile True:\n"
    "    held.append(bytearray(20 << 20))\n    time.sleep(0.1)\n"
)
# Allocates 100 MB, then spins 1 s of its own CPU.
SPIN = (
    "import time\nheld = bytearray(100 << 20)\nstart = time.process_time()\n"
    "while time.process_time() - start < 1.0:\n    pass\n"
)


pytestmark = pytest.mark.usefixtures("subreaper")


def stat(pid: int, ppid: int, cpu: float = 0.0, reaped: float = 0.0, rss: int = 0) -> Stat:
    return Stat(pid, ppid, 0, False, cpu, reaped, rss, pid * 10)


# -- pure pieces -------------------------------------------------------------------------


def test_parse_stat_counts_fields_after_the_last_parenthesis() -> None:
    line = "42 (a) b (c)) S 7 42 42 0 -1 4194560 1 0 0 0 250 50 100 0 20 0 1 0 999 0 25 0 0"
    parsed = parse_stat(line)
    assert parsed is not None
    ticks = os.sysconf("SC_CLK_TCK")
    assert (parsed.pid, parsed.ppid, parsed.session, parsed.zombie) == (42, 7, 42, False)
    assert parsed.cpu == pytest.approx(300 / ticks) and parsed.reaped_cpu == pytest.approx(
        100 / ticks
    )
    assert (parsed.rss, parsed.start) == (25 * os.sysconf("SC_PAGE_SIZE"), 999)
    assert parse_stat("garbage") is None


def test_tree_is_the_descendants_and_the_session() -> None:
    table = {s.pid: s for s in [stat(10, 1), stat(11, 10), stat(12, 11), stat(20, 1)]}
    table[30] = Stat(30, 1, 10, False, 0.0, 0.0, 0, 0)  # left the tree, still in the session
    assert sorted(s.pid for s in tree(table, 10)) == [10, 11, 12, 30]


def test_sampler_counts_cpu_of_children_gone_without_a_parent_in_the_tree() -> None:
    sampler = Sampler(10, Limits(cpu=5.0), 0.0)
    assert sampler.add([stat(10, 1, 1.0), stat(11, 10, 2.0), stat(12, 11, 1.0)]) is None
    assert sampler.cpu == pytest.approx(4.0)
    # 11 was reaped by 10 (its 2 s now in 10's reaped CPU); 12 lost its parent and went
    # before anyone in the tree waited for it: its last 1 s is credited.
    assert sampler.add([stat(10, 1, 1.0, reaped=2.0), stat(13, 10, 0.5)]) is None
    assert sampler.cpu == pytest.approx(1.0 + 2.0 + 1.0 + 0.5)
    # CPU never shrinks, and crossing the limit names it.
    assert sampler.add([stat(10, 1, 1.0, reaped=2.5)]) is None
    assert sampler.cpu == pytest.approx(4.5)
    assert sampler.add([stat(10, 1, 1.6, reaped=2.5)]) is KillReason.CPU


def test_sampler_reports_the_first_limit_crossed_and_the_peak() -> None:
    sampler = Sampler(10, Limits(memory=100, procs=2), 0.0)
    assert sampler.add([stat(10, 1, rss=60), stat(11, 10, rss=30)]) is None
    assert sampler.add([stat(10, 1, rss=60), stat(11, 10, rss=50)]) is KillReason.MEMORY
    assert sampler.add([stat(10, 1), stat(11, 10), stat(12, 10)]) is KillReason.PROCS
    usage = sampler.usage()
    assert (usage.peak_memory, usage.procs) == (110, 3)


def test_without_limits_the_first_sample_is_one_interval_after_the_spawn() -> None:
    # A command shorter than that costs no /proc scan (and its peak stays unknown).
    assert Sampler(10, NO_LIMITS, 5.0).due() == 5.0 + ACCOUNT_INTERVAL
    assert Sampler(10, Limits(procs=3), 5.0).due() == 5.0


def test_read_table_sees_this_process() -> None:
    me = read_table()[os.getpid()]
    assert me.ppid == os.getppid() and me.rss > 0 and not me.zombie


# -- real commands -----------------------------------------------------------------------


def bound(limit: int, per_step: int, steps: int) -> int:
    """The stated overshoot: what the command allocates in one interval plus the scan and
    SCAN_WAIT (two of its 100 ms steps here), with ``steps`` of margin for a busy machine."""
    return limit + per_step * steps


def test_memory_over_the_limit_is_killed_within_the_stated_overshoot() -> None:
    result = run([PY, "-c", ALLOCATE], b"", ENV, limits=Limits(memory=200 * MB))
    assert result.killed is KillReason.MEMORY
    assert result.kill_signals[0] == "SIGTERM"
    peak = result.usage.peak_memory
    assert peak is not None and 200 * MB < peak <= bound(200 * MB, 20 * MB, 6), peak


def test_the_tree_counts_not_one_process() -> None:
    # Four children of 60 MB each: none alone is near 200 MB, together they are over it.
    child = f"{PY} -c 'import time; b = bytearray(60 << 20); time.sleep(20)'"
    script = f"for i in 1 2 3 4; do {child} & done; wait"
    result = run(["/bin/bash", "-c", script], b"", ENV, limits=Limits(memory=200 * MB))
    assert result.killed is KillReason.MEMORY
    assert result.usage.procs is not None and result.usage.procs >= 4


def our_descendants() -> list[psutil.Process]:
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


def test_a_fork_bomb_is_killed_for_procs_and_leaves_nothing() -> None:
    # A binary fork bomb, capped at depth 9 (1023 processes) should the limit fail.
    bomb = "b() { [ $1 -gt 0 ] && { b $(($1 - 1)) & b $(($1 - 1)) & }; sleep 60; }; b 9"
    before = {p.pid for p in our_descendants()}
    result = run(["/bin/bash", "-c", bomb], b"", ENV, limits=Limits(procs=50), grace=0.5)
    assert result.killed is KillReason.PROCS
    assert result.usage.procs is not None and result.usage.procs > 50
    wait_until(lambda: not {p.pid for p in our_descendants()} - before, 10,
               message="every process of the bomb gone")  # fmt: skip


def test_cpu_limit_counts_cpu_seconds_not_wall_time() -> None:
    result = run(["/bin/bash", "-c", "while :; do :; done"], b"", ENV, limits=Limits(cpu=2.0))
    assert result.killed is KillReason.CPU
    cpu = result.usage.cpu_s
    # Caught within one sample of crossing: a spinner gets at most one core per interval.
    assert cpu is not None and 2.0 < cpu < 2.0 + 1.0, cpu


def test_a_sleeping_command_is_never_killed_by_the_cpu_limit() -> None:
    result = run(["/bin/bash", "-c", "sleep 1.5"], b"", ENV, limits=Limits(cpu=0.2))
    assert (result.exit_code, result.killed) == (0, None)
    assert result.usage.cpu_s is not None and result.usage.cpu_s < 0.2


def time_v(argv: list[str]) -> tuple[int, float]:
    """``/usr/bin/time -v``'s maximum resident set (bytes) and user + system seconds."""
    out = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True,
                         check=True, timeout=60).stderr  # fmt: skip

    def field(name: str) -> float:
        match = re.search(rf"{name}: ([\d.]+)", out)
        assert match, out
        return float(match[1])

    cpu = field(r"User time \(seconds\)") + field(r"System time \(seconds\)")
    return int(field(r"Maximum resident set size \(kbytes\)")) * 1024, cpu


# Resident memory of this process's own, larger than what the command uses: a peak taken
# from rusage after a vfork spawn would show it (Linux keeps the parent's high water mark).
BALLAST = 300 << 20


@pytest.mark.skipif(not os.path.exists("/usr/bin/time"), reason="needs GNU time")
def test_accounting_without_limits_matches_gnu_time() -> None:
    # Longer than ACCOUNT_INTERVAL: sampled for its figures although no limit is set.
    argv = [PY, "-c", SPIN.replace("< 1.0", "< 1.5")]
    ballast = bytearray(b"\1") * BALLAST
    result = run(argv, b"", ENV)
    del ballast
    memory, cpu = time_v(argv)
    assert (result.exit_code, result.killed) == (0, None)
    # The samples' peak, not rusage's (that would be this process's ballast).
    assert result.usage.peak_memory == pytest.approx(memory, rel=0.10)
    assert result.usage.cpu_s == pytest.approx(cpu, rel=0.10)
    assert result.usage.procs == 1


@pytest.mark.skipif(not os.path.exists("/usr/bin/time"), reason="needs GNU time")
def test_accounting_with_limits_matches_gnu_time() -> None:
    argv = [PY, "-c", SPIN]
    ballast = bytearray(b"\1") * BALLAST
    result = run(argv, b"", ENV, limits=Limits(memory=1 << 30, cpu=60.0, procs=100))
    del ballast
    memory, cpu = time_v(argv)
    assert (result.exit_code, result.killed) == (0, None)
    assert result.usage.peak_memory == pytest.approx(memory, rel=0.10)
    assert result.usage.cpu_s == pytest.approx(cpu, rel=0.10)
    assert result.usage.procs == 1
