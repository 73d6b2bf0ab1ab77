"""Per-job cgroups (issue #29): what the supervisor may manage, and limited runs in them.

The pure parts (``/proc/self/cgroup``, mountinfo, choosing the mechanism) read text and a
fake cgroup tree in ``tmp_path``. The runs are real processes in real cgroups: they run
wherever this machine lets this process manage cgroup v1 or a delegated v2 (as root in a
container, or under systemd ``Delegate=yes``) and skip, saying why, where it does not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cmdstalk_py.process import KillReason, cgroup, set_child_subreaper
from cmdstalk_py.process.cgroup import (
    Hierarchy,
    Unusable,
    detect,
    parse_mountinfo,
    parse_self_cgroup,
)
from cmdstalk_py.process.jobcgroup import joining
from cmdstalk_py.process.usage import Limits
from tests.helpers import wait_until
from tests.process.aio import run
from tests.process.test_usage import BALLAST, ENV, MB, PY, SPIN, our_descendants, time_v

SELF_V1 = "12:pids:/\n4:memory:/ci/box\n3:cpu,cpuacct:/\n1:name=systemd:/x\n0::/\n"
MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
)


# -- the pure parts ----------------------------------------------------------------------


def test_parse_self_cgroup_maps_each_controller_and_v2() -> None:
    paths = parse_self_cgroup(SELF_V1)
    assert paths["memory"] == "/ci/box" and paths["cpuacct"] == paths["cpu"] == "/"
    assert paths[""] == "/" and paths["name=systemd"] == "/x"


def test_parse_mountinfo_keeps_cgroup_mounts_and_unescapes() -> None:
    text = MOUNTS + r"50 31 0:40 /a\040b /mnt/c\040g rw - cgroup2 none rw" + "\n"
    mounts = parse_mountinfo(text)
    assert [m.fstype for m in mounts] == ["cgroup"] * 3 + ["cgroup2"] * 2
    assert "cpuacct" in mounts[1].options and (mounts[4].root, mounts[4].point) == (
        "/a b", "/mnt/c g",
    )  # fmt: skip


def make(root: Path, path: str, files: dict[str, str] | None = None) -> Path:
    directory = root / path.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (directory / name).write_text(text)
    return directory


def test_a_delegated_v2_cgroup_is_chosen_first(tmp_path: Path) -> None:
    # Our cgroup, as a systemd service with Delegate=yes sees it.
    make(tmp_path, "sys/fs/cgroup/unified/svc", {"cgroup.controllers": "cpu memory pids",
         "cgroup.subtree_control": "", "cgroup.procs": "1\n"})  # fmt: skip
    for name in ("memory", "pids", "cpu,cpuacct"):
        make(tmp_path, f"sys/fs/cgroup/{name}")
    chosen = detect(SELF_V1.replace("0::/", "0::/svc"), MOUNTS, tmp_path)
    assert (chosen.version, chosen.dirs) == (2, {"": tmp_path / "sys/fs/cgroup/unified/svc"})


def test_v2_without_controllers_falls_back_to_writable_v1(tmp_path: Path) -> None:
    make(tmp_path, "sys/fs/cgroup/unified", {"cgroup.controllers": "", "cgroup.procs": ""})
    for name in ("memory/ci/box", "pids", "cpu,cpuacct"):
        make(tmp_path, f"sys/fs/cgroup/{name}")
    chosen = detect(SELF_V1, MOUNTS, tmp_path)
    assert chosen.version == 1
    assert chosen.dirs["memory"] == tmp_path / "sys/fs/cgroup/memory/ci/box"
    assert chosen.dirs["cpuacct"] == tmp_path / "sys/fs/cgroup/cpu,cpuacct"


def test_nothing_to_manage_says_why_for_each_version(tmp_path: Path) -> None:
    make(tmp_path, "sys/fs/cgroup/unified", {"cgroup.controllers": "cpu"})
    make(tmp_path, "sys/fs/cgroup/memory/ci/box")
    why = r"v2: .* does not offer memory pids .*; v1: no pids hierarchy$"
    with pytest.raises(Unusable, match=why):
        detect(SELF_V1, MOUNTS.replace("cgroup rw,pids", "cgroup rw,freezer"), tmp_path)


def test_a_supervisor_restarted_in_its_leaf_manages_the_delegated_parent(tmp_path: Path) -> None:
    make(tmp_path, "sys/fs/cgroup/unified/svc", {"cgroup.controllers": "memory pids",
         "cgroup.subtree_control": "memory pids"})  # fmt: skip
    make(tmp_path, "sys/fs/cgroup/unified/svc/supervisor", {"cgroup.controllers": "memory pids"})
    chosen = detect("0::/svc/supervisor\n", MOUNTS, tmp_path)
    assert chosen.dirs == {"": tmp_path / "sys/fs/cgroup/unified/svc"}


def delegated(tmp_path: Path, procs: str) -> Hierarchy:
    files = {"cgroup.controllers": "memory pids", "cgroup.subtree_control": "",
             "cgroup.procs": procs, "cgroup.type": "domain\n"}  # fmt: skip
    make(tmp_path, "cg/svc", files)
    return detect("0::/svc\n", "41 31 0:38 / /cg rw - cgroup2 cgroup2 rw\n", tmp_path)


def test_v2_setup_moves_the_supervisor_to_a_leaf_then_enables_controllers(tmp_path: Path) -> None:
    # (A fake tree: the files take what the supervisor writes, no kernel behind them.)
    assert delegated(tmp_path, f"{os.getpid()}\n").prepare() == 0
    assert (tmp_path / "cg/svc/supervisor/cgroup.procs").read_text() == str(os.getpid())
    assert (tmp_path / "cg/svc/cgroup.subtree_control").read_text() == "+memory +pids"


def test_v2_setup_refuses_a_cgroup_shared_with_other_processes(tmp_path: Path) -> None:
    hierarchy = delegated(tmp_path, f"{os.getpid()}\n1\n")
    with pytest.raises(Unusable, match=r"holds 1 process\(es\) besides cmdstalk"):
        hierarchy.prepare()
    assert (tmp_path / "cg/svc/cgroup.subtree_control").read_text() == ""


def test_a_mount_of_a_subtree_is_resolved_and_outside_it_refused(tmp_path: Path) -> None:
    mounts = "41 31 0:38 /ci /cg rw - cgroup2 cgroup2 rw\n"
    make(tmp_path, "cg/box", {"cgroup.controllers": "memory pids", "cgroup.subtree_control": ""})
    assert detect("0::/ci/box\n", mounts, tmp_path).dirs == {"": tmp_path / "cg/box"}
    with pytest.raises(Unusable, match="outside the mounted /ci"):
        detect("0::/other\n", mounts, tmp_path)


def test_joining_checks_the_program_then_moves_before_the_exec() -> None:
    argv = joining(["/cg/a/cgroup.procs", "/cg/b x/cgroup.procs"], ["true", "arg"])
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3:] == ["cmdstalk", "true", "arg"]
    assert "echo 0 >'/cg/b x/cgroup.procs'" in argv[2] and argv[2].endswith('exec "$@"')
    with pytest.raises(FileNotFoundError):
        joining([], ["no-such-program-here"])
    with pytest.raises(FileNotFoundError):
        joining([], ["/no/such/program"])


# -- real cgroups ------------------------------------------------------------------------


def job_cgroups(hierarchy: Hierarchy) -> list[Path]:
    """The job cgroups of this process in every hierarchy."""
    prefix = f"cmdstalk-{os.getpid()}-"
    return [e for d in hierarchy.dirs.values() for e in d.iterdir() if e.name.startswith(prefix)]


@pytest.fixture
def cgroups() -> Iterator[Hierarchy]:
    """This process manages cgroups, as a supervisor started with ``--limits-via cgroup``;
    after the test every job cgroup it made is gone."""
    try:
        cgroup.configure("cgroup")
    except Unusable as e:
        pytest.skip(f"this machine gives this process no cgroup to manage: {e}")
    hierarchy = cgroup.active()
    assert hierarchy is not None
    assert set_child_subreaper(True)
    try:
        yield hierarchy
        assert job_cgroups(hierarchy) == []
    finally:
        set_child_subreaper(False)
        cgroup.configure("proc")


def test_the_kernel_holds_memory_to_the_limit_and_the_oom_kill_is_memory(
    cgroups: Hierarchy,
) -> None:
    # 300 MB at once: faster than any sample, so only a kernel limit holds it at 200.
    result = run([PY, "-c", "b = bytearray(300 << 20)"], b"", ENV, limits=Limits(memory=200 * MB))
    assert result.killed is KillReason.MEMORY
    peak = result.usage.peak_memory
    assert peak is not None and peak <= 200 * MB, peak


def test_a_fork_bomb_under_the_pids_limit_is_procs_and_leaves_nothing(
    cgroups: Hierarchy,
) -> None:
    bomb = "b() { [ $1 -gt 0 ] && { b $(($1 - 1)) & b $(($1 - 1)) & }; sleep 60; }; b 9"
    before = {p.pid for p in our_descendants()}
    result = run(["/bin/bash", "-c", bomb], b"", ENV, limits=Limits(procs=50), grace=0.5)
    assert result.killed is KillReason.PROCS
    # The kernel refused the 51st: never more than 50 at once.
    assert result.usage.procs is not None and result.usage.procs <= 50
    wait_until(lambda: not {p.pid for p in our_descendants()} - before, 10,
               message="every process of the bomb gone")  # fmt: skip


@pytest.mark.skipif(not os.path.exists("/usr/bin/time"), reason="needs GNU time")
def test_exact_figures_match_gnu_time(cgroups: Hierarchy) -> None:
    argv = [PY, "-c", SPIN]
    ballast = bytearray(b"\1") * BALLAST
    result = run(argv, b"", ENV, limits=Limits(memory=1 << 30, cpu=60.0, procs=100))
    del ballast
    memory, cpu = time_v(argv)
    assert (result.exit_code, result.killed) == (0, None)
    assert result.usage.peak_memory == pytest.approx(memory, rel=0.10)
    assert result.usage.cpu_s == pytest.approx(cpu, rel=0.10)


def test_cpu_is_the_cgroups_counter_checked_each_sample(cgroups: Hierarchy) -> None:
    result = run(["/bin/bash", "-c", "while :; do :; done"], b"", ENV, limits=Limits(cpu=1.0))
    assert result.killed is KillReason.CPU
    cpu = result.usage.cpu_s
    assert cpu is not None and 1.0 < cpu < 1.0 + 1.0, cpu


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_double_forked_setsid_escapee_is_counted_and_killed(
    cgroups: Hierarchy, tmp_path: Path
) -> None:
    # It leaves the session, the group and the tree (setsid -f: its parent exits at once),
    # holds 150 MB, and the command exits 0 once it says so.
    pidfile = tmp_path / "escapee"
    escapee = (f"import os, time; b = bytearray(150 << 20); "
               f"open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)")  # fmt: skip
    script = f'setsid -f {PY} -c "{escapee}"; while [ ! -s {pidfile} ]; do sleep 0.02; done'
    result = run(["/bin/bash", "-c", script], b"", ENV, limits=Limits(memory=1 << 30))
    assert (result.exit_code, result.killed) == (0, None)
    assert result.usage.peak_memory is not None and result.usage.peak_memory >= 150 * MB
    pid = int(pidfile.read_text())
    wait_until(lambda: gone(pid), 10, message=f"escapee {pid} killed")
    os.waitpid(pid, 0)  # adopted by this process (a subreaper), as by a supervisor


def test_a_cgroup_left_by_a_killed_supervisor_is_removed_at_the_next_start(
    cgroups: Hierarchy,
) -> None:
    # A supervisor's job cgroup with a process in it; then the supervisor dies. (Alive
    # until then: another test's start-up must not take the cgroup for stale too soon.)
    supervisor = psutil.Popen(["sleep", "60"])
    made = [d / f"cmdstalk-{supervisor.pid}-1" for d in cgroups.dirs.values()]
    for directory in made:
        directory.mkdir()
    files = " ".join(str(d / "cgroup.procs") for d in made)
    joined = f"for f in {files}; do echo 0 > $f; done; exec sleep 60"
    left = psutil.Popen(["/bin/sh", "-c", joined], start_new_session=True)
    wait_until(lambda: left.pid in [int(p) for p in (made[0] / "cgroup.procs").read_text().split()],
               5, message="the leftover in its cgroup")  # fmt: skip
    supervisor.kill()
    supervisor.wait()
    # (Not how many the line says: another test's start-up may have removed this one.)
    cgroup.configure("cgroup")
    assert not any(d.exists() for d in made)
    left.wait(10)  # killed (a live supervisor's job cgroups, this test's own, stay)
