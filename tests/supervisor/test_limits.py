"""Limits of a command's process tree (issue #29), on the supervisor's side: the decision,
the options (flags, ``CMDSTALK_*``, config-file keys, bad input), and real jobs on both
servers: the bury with its reason, kick, a reload, the event log and the log line."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from cmdstalk_py.process import cgroup
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.policy import decide
from cmdstalk_py.supervisor.poolfile import PoolFileError, load_pools
from cmdstalk_py.supervisor.results import Outcome, Reason
from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import stop_process
from tests.supervisor.conftest import cmdstalk_env, config_for, read_events, run_one, start_cmdstalk
from tests.supervisor.test_reload import pools_running

MB = 1 << 20
# Holds 300 MB for a moment, then exits 0: over a 200 MB limit, under a 1 GB one.
GREEDY = f"{sys.executable} -c 'import time; b = bytearray(300 << 20); time.sleep(0.5)'"


# -- the decision (pure) -------------------------------------------------------------------


@pytest.mark.parametrize("reason", [Reason.MEMORY, Reason.CPU, Reason.PROCS])
def test_a_limit_kill_buries_with_its_reason_whatever_the_exit(reason: Reason) -> None:
    for exit_code in (0, 1, None):
        decision = decide(exit_code=exit_code, ttr_killed=False, shutdown_killed=False,
                          stopping=False, releases=0, limit_killed=reason)  # fmt: skip
        assert (decision.outcome, decision.reason) == (Outcome.BURIED, reason)


def test_on_limit_release_follows_the_backoff_curve() -> None:
    decision = decide(exit_code=None, ttr_killed=False, shutdown_killed=False, stopping=False,
                      releases=2, limit_killed=Reason.MEMORY, on_limit="release")  # fmt: skip
    assert (decision.outcome, decision.delay, decision.reason) == (
        Outcome.RELEASED, 16, Reason.MEMORY,
    )  # fmt: skip


# -- the options ---------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cmdstalk_py", "--cmd", "true", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=cmdstalk_env())


@pytest.mark.parametrize(
    "args",
    [
        ("--max-memory", "nan"), ("--max-memory", "-1M"), ("--max-memory", "0"),
        ("--max-memory", "5X"), ("--max-memory", "2P"), ("--max-memory", "1e9"),
        ("--max-cpu", "nan"), ("--max-cpu", "-1"), ("--max-cpu", "0"), ("--max-cpu", "inf"),
        ("--max-procs", "0"), ("--max-procs", "-5"), ("--max-procs", "1e3"),
        ("--on-limit", "delete"), ("--limits-via", "cgroups"),
    ],
)  # fmt: skip
def test_bad_limits_are_one_error_line_and_exit_2(args: tuple[str, str]) -> None:
    proc = cli(*args, "--check")
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and args[0] in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_file_keys(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(
        'max_memory = "512M"\nmax_cpu = 30\n[pools.a]\ncommand = "true"\n'
        '[pools.b]\ncommand = "true"\ntubes = ["b"]\nmax_procs = 50\non_limit = "release"\n'
        'max_memory = "2G"\n'
    )
    a, b = load_pools(path)
    assert (a.max_memory, a.max_cpu, a.max_procs, a.on_limit) == (512 * MB, 30.0, None, "bury")
    assert (b.max_memory, b.max_procs, b.on_limit) == (2 << 30, 50, "release")
    path.write_text('[pools.a]\ncommand = "true"\nmax_memory = "0"\n')
    with pytest.raises(PoolFileError, match=r"pools\.a\.max_memory"):
        load_pools(path)


def test_a_config_built_in_code_is_checked() -> None:
    with pytest.raises(ValueError, match="max_memory"):
        Config(cmd="true", max_memory=0)
    with pytest.raises(ValueError, match="max_cpu"):
        Config(cmd="true", max_cpu=float("nan"))
    with pytest.raises(ValueError, match="on_limit"):
        Config(cmd="true", on_limit="delete")


# -- real jobs -----------------------------------------------------------------------------


def test_memory_bury_then_kick_gives_a_fresh_try(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    # Greedy on its first run only: after the kick it passes.
    once = tmp_path / "ran"
    cmd = f"if [ -e {once} ]; then exit 0; fi; touch {once}; {GREEDY}"
    producer = beanstalk.client(use="lim-kick")
    job_id = producer.put(b"", ttr=60)
    broker = Broker(config_for(beanstalk, cmd, max_memory=200 * MB), "lim-kick", 0)
    first = run_one(broker)
    assert (first.outcome, first.reason, first.killed) == (
        Outcome.BURIED, Reason.MEMORY, Reason.MEMORY,
    )  # fmt: skip
    assert first.peak_memory_bytes is not None and first.peak_memory_bytes > 200 * MB
    assert producer.stats_job(job_id)["state"] == "buried"
    producer.kick_job(job_id)
    second = run_one(broker)
    assert (second.job_id, second.outcome, second.killed) == (job_id, Outcome.DELETED, None)


def test_limits_change_on_reload_for_the_next_job(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="lim-rl")
    tight = config_for(beanstalk, GREEDY, tubes=("lim-rl",), pool="p", max_memory=200 * MB)
    with pools_running([tight]) as (sup, seen, source):
        first = producer.put(b"", ttr=60)
        assert seen.wait_outcome(first, Outcome.BURIED, 30).reason is Reason.MEMORY
        source.pools = [replace(tight, max_memory=1 << 30)]
        sup.request_reload()
        wait_until(lambda: [c.max_memory for c in sup.configs] == [1 << 30], 10,
                   message="the new limit in place")  # fmt: skip
        second = producer.put(b"", ttr=60)
        assert seen.wait_outcome(second, Outcome.DELETED, 30).killed is None


def test_figures_in_the_event_log_and_the_log_line(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    producer = beanstalk.client(use="lim-ev")
    plain = producer.put(b"true", ttr=60)
    greedy = producer.put(GREEDY.encode(), ttr=60)
    proc = start_cmdstalk(
        "--address", beanstalk.address, "--tubes", "lim-ev", "--cmd", 'eval "$(cat)"',
        "--events", str(events), "--max-memory", "200M", stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: len(read_events(events)) >= 2, 60, message="2 event records")
    finally:
        stop_process(proc)
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode()
    by_id = {r["job_id"]: r for r in read_events(events)}
    assert all(r["schema"] == 4 for r in by_id.values())
    ok, over = by_id[plain], by_id[greedy]
    assert (ok["outcome"], ok["killed"]) == ("deleted", None)
    assert (over["outcome"], over["reason"], over["killed"]) == ("buried", "memory", "memory")
    # At the limit exactly where the kernel held it (a cgroup), past it where sampled.
    assert over["peak_memory_bytes"] >= 200 * MB
    # `true` may end before its first sample is in: then its peak is not known.
    assert ok["peak_memory_bytes"] is None or ok["peak_memory_bytes"] < 200 * MB
    assert all(isinstance(r["cpu_s"], float) for r in (ok, over)) and over["procs"] >= 1
    # "(memory)" after our kill's signal; "(killed: memory)" after the kernel's OOM kill of
    # the shell's child (a cgroup's limit), the shell then exiting 137.
    assert "memory), buried by memory" in stderr and "MiB peak" in stderr


def managed_cgroups() -> cgroup.Hierarchy:
    """What a supervisor started from this process may manage; skips where nothing."""
    try:
        return cgroup.detect(Path("/proc/self/cgroup").read_text(),
                             Path("/proc/self/mountinfo").read_text())  # fmt: skip
    except cgroup.Unusable as e:
        pytest.skip(f"this machine gives this process no cgroup to manage: {e}")


def test_a_killed_supervisors_job_cgroup_is_removed_by_the_next_start(
    bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    beanstalk = bundled_server  # (what is under test is the start-up, not the server)
    hierarchy = managed_cgroups()
    pidfile = tmp_path / "escapee"
    # Leaves a process that escapes the sentinel (new session, out of the tree); only its
    # cgroup still holds it.
    cmd = f"setsid -f /bin/sh -c 'echo $$ > {pidfile}; exec sleep 300'; sleep 300"
    args = ("--address", beanstalk.address, "--tubes", "lim-cg", "--cmd", cmd,
            "--limits-via", "cgroup", "--max-memory", "1G")  # fmt: skip
    beanstalk.client(use="lim-cg").put(b"", ttr=600)
    first = start_cmdstalk(*args, stdout=subprocess.DEVNULL)
    second = None
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 30,
                   message="the job running, its escapee started")  # fmt: skip
        made = [d / f"cmdstalk-{first.pid}-1" for d in hierarchy.dirs.values()]
        assert all(d.is_dir() for d in made)
        first.kill()
        first.wait(10)
        escapee = int(pidfile.read_text())
        assert psutil.pid_exists(escapee) and all(d.is_dir() for d in made)
        log = tmp_path / "second.log"
        with open(log, "wb") as stderr:
            # Another tube: the first's job, back in the queue, must not run again here.
            again = (*args[:3], "lim-cg-idle", *args[4:])
            second = start_cmdstalk(*again, stdout=subprocess.DEVNULL, stderr=stderr)
        wait_until(lambda: not any(d.exists() for d in made), 30,
                   message="the stale job cgroup removed")  # fmt: skip
        wait_until(lambda: gone(escapee), 10, message="the escapee killed")
        # The one line at start naming the mechanism. (Not how many it removed: another
        # test's start-up may have removed this one first.)
        wait_until(lambda: "limits: a cgroup per limited job" in log.read_text(), 30,
                   message="the mechanism's line")  # fmt: skip
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
