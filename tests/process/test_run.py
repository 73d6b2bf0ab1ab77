"""run_command: real subprocesses, real pipes, real signals."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.process import KillReason, Switch, reap_orphans
from cmdstalk_py.process.output import LineBudget, OutputStream
from tests.helpers import wait_until
from tests.process.aio import open_fds, run

BASH = "/bin/bash"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


def sh(script: str) -> list[str]:
    return [BASH, "-c", script]


pytestmark = pytest.mark.usefixtures("subreaper")


def our_zombies() -> list[psutil.Process]:
    zombies = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                zombies.append(child)
        except psutil.NoSuchProcess:
            continue
    return zombies


def assert_gone(proc: psutil.Process) -> None:
    """``proc`` no longer exists (a zombie would count as existing)."""
    assert not proc.is_running(), f"pid {proc.pid} still exists: {proc.status()}"


class Announced:
    """Collects stdout lines; on a line ``gc PID`` remembers that process and sets ``then``."""

    def __init__(self, then: Switch | None = None) -> None:
        self.lines: list[bytes] = []
        self.procs: list[psutil.Process] = []
        self.then = then

    def __call__(self, line: bytes) -> None:
        self.lines.append(line)
        if line.startswith(b"gc "):
            self.procs.append(psutil.Process(int(line.split()[1])))
            if self.then is not None:
                self.then.set()


# -- exit status, input, output ------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 3, 255])
def test_exit_code_is_reported(code: int) -> None:
    result = run(sh(f"exit {code}"), b"", ENV)
    assert result.exit_code == code
    assert result.signal is None
    assert result.killed is None
    assert result.spawn_error is None
    assert result.succeeded is (code == 0)


def test_payload_piped_and_output_captured() -> None:
    result = run(sh("tr a-z A-Z; echo oops >&2"), b"hello world\n", ENV)
    assert result.exit_code == 0
    assert result.stdout_tail == b"HELLO WORLD\n"
    assert result.stderr_tail == b"oops\n"


def test_binary_payload_arrives_byte_exact() -> None:
    payload = bytes(range(256))  # includes NUL, CR, LF and every high byte
    assert b"\r\n" in payload or b"\r" in payload
    result = run(sh("sha256sum"), payload, ENV)
    assert result.exit_code == 0
    assert result.stdout_tail.split()[0].decode() == hashlib.sha256(payload).hexdigest()


def test_environment_is_exactly_what_was_given() -> None:
    result = run(["/usr/bin/env"], b"", {"CMDSTALK_JOB_ID": "42", "FOO": "b a r"})
    assert sorted(result.stdout_tail.splitlines()) == [b"CMDSTALK_JOB_ID=42", b"FOO=b a r"]


def test_command_runs_in_its_own_session_and_group() -> None:
    # /proc/PID/stat: pid (comm) state ppid pgrp session ...
    result = run(sh("echo $$; cut -d' ' -f5,6 /proc/$$/stat"), b"", ENV)
    pid, ids = result.stdout_tail.splitlines()
    assert ids.split() == [pid, pid]
    assert int(pid) != os.getpgid(0)


def test_sigpipe_has_default_disposition_in_the_command() -> None:
    # Python ignores SIGPIPE; if that leaked, `yes` would report EPIPE on stderr.
    result = run(sh("yes | head -n 1"), b"", ENV)
    assert result.exit_code == 0
    assert result.stdout_tail == b"y\n"
    assert result.stderr_tail == b""


def test_big_payload_and_big_output_do_not_deadlock() -> None:
    payload = os.urandom(1 << 20)
    # Write 20 MB first, while our 1 MiB payload is still pending, then read stdin.
    script = "head -c 20000000 /dev/zero; sha256sum"
    sizes: list[int] = []
    result = run(
        sh(script),
        payload,
        ENV,
        deadline=time.monotonic() + 30,
        on_stdout_line=lambda line: sizes.append(len(line)),
    )
    assert result.exit_code == 0, result
    assert result.killed is None
    digest = hashlib.sha256(payload).hexdigest().encode()
    assert result.stdout_tail.endswith(digest + b"  -\n")
    assert len(result.stdout_tail) == 4096
    # 20 MB of NULs, the digest line glued to it, all delivered in bounded pieces.
    assert sum(sizes) == 20_000_000 + len(digest) + 3
    assert max(sizes) <= 65536


@pytest.mark.parametrize("script", ["exit 0", "sleep 0.2; exit 0", "exec 0<&-; sleep 0.2"])
def test_command_not_reading_stdin_is_fine(script: str) -> None:
    result = run(sh(script), os.urandom(1 << 20), ENV, deadline=time.monotonic() + 20)
    assert result.exit_code == 0
    assert result.killed is None


def test_small_payload_to_command_that_exits_at_once() -> None:
    for _ in range(20):
        result = run(["/bin/true"], b"x" * 100, ENV)
        assert result.exit_code == 0


def test_tails_are_bounded() -> None:
    result = run(sh("seq 1 100000; seq 1 100000 >&2"), b"", ENV, tail_bytes=16)
    assert result.stdout_tail == b"98\n99999\n100000\n"
    assert result.stderr_tail == result.stdout_tail
    assert run(sh("echo hi"), b"", ENV, tail_bytes=0).stdout_tail == b""


def test_line_callbacks_get_lines_in_order() -> None:
    out: list[bytes] = []
    err: list[bytes] = []
    result = run(
        sh("seq 1 20000; printf 'e1\\r\\ne2\\n\\nlast' >&2; printf 'no newline'"),
        b"",
        ENV,
        on_stdout_line=out.append,
        on_stderr_line=err.append,
    )
    assert result.exit_code == 0
    assert out == [str(i).encode() for i in range(1, 20001)] + [b"no newline"]
    assert err == [b"e1\r", b"e2", b"", b"last"]


def test_long_line_without_newline_is_emitted_in_bounded_pieces() -> None:
    pieces: list[int] = []
    result = run(
        sh("head -c 5000000 /dev/zero | tr '\\0' x"),
        b"",
        ENV,
        on_stdout_line=lambda line: pieces.append(len(line)),
        max_line_bytes=10000,
    )
    assert result.exit_code == 0
    assert sum(pieces) == 5_000_000
    assert max(pieces) == 10000
    assert result.stdout_tail == b"x" * 4096


def test_no_file_descriptors_leak() -> None:
    before = open_fds()
    for script in ("exit 0", "exit 1", "echo out; echo err >&2"):
        run(sh(script), b"payload", ENV)
    run(["/nonexistent/cmd"], b"", ENV)
    run(sh("sleep 30"), b"", ENV, deadline=time.monotonic())
    assert open_fds() == before


# -- spawn errors -----------------------------------------------------------------------


def test_missing_shell_is_a_spawn_error_not_an_exception() -> None:
    result = run(["/bin/bsh", "-c", "true"], b"payload", ENV)
    assert result.spawn_error == "No such file or directory: /bin/bsh"
    assert result.exit_code is None
    assert result.signal is None
    assert result.killed is None


def test_program_not_on_path_and_not_executable(tmp_path: Path) -> None:
    assert "No such file" in (run(["no-such-program-xyz"], b"", ENV).spawn_error or "")
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\nexit 0\n")
    not_executable.chmod(0o644)
    error = run([str(not_executable)], b"", ENV).spawn_error
    assert error == f"Permission denied: {not_executable}"
    assert run([], b"", ENV).spawn_error == "empty command"
    bad_env = run(["/bin/true"], b"", {"A": "nul\0byte"}).spawn_error
    assert bad_env == "embedded null byte: /bin/true"


# -- killing ----------------------------------------------------------------------------


def test_deadline_terms_the_group() -> None:
    sent: list[str] = []
    started = time.monotonic()
    result = run(
        sh("sleep 60 & sleep 60"), b"", ENV, deadline=started + 0.3, grace=10, on_kill=sent.append
    )
    assert result.killed is KillReason.TTR
    assert result.signal == 15
    assert result.exit_code is None
    assert result.kill_signals == ("SIGTERM",)
    assert sent == ["SIGTERM"]
    # Killed at the deadline, and the background sleep died of SIGTERM too (no SIGKILL).
    assert 0.3 <= result.duration_s < 5
    assert time.monotonic() - started < 5
    assert our_zombies() == []


def test_command_ignoring_sigterm_is_killed_after_grace() -> None:
    started = time.monotonic()
    result = run(
        sh("trap '' TERM; sleep 60 & sleep 60"),
        b"",
        ENV,
        deadline=started + 0.2,
        grace=0.5,
    )
    assert result.killed is KillReason.TTR
    assert result.signal == 9
    assert result.kill_signals == ("SIGTERM", "SIGKILL")
    assert result.duration_s >= 0.7
    assert time.monotonic() - started < 8
    assert our_zombies() == []


def test_grandchild_holding_stdout_is_killed_with_everything() -> None:
    lines = Announced()
    started = time.monotonic()
    result = run(
        sh("(trap '' TERM; sleep 60) & echo gc $!; bash -c 'sleep 60' & wait"),
        b"",
        ENV,
        deadline=started + 0.5,
        grace=0.5,
        on_stdout_line=lines,
    )
    assert result.killed is KillReason.TTR
    assert time.monotonic() - started < 8
    [grandchild] = lines.procs
    assert_gone(grandchild)
    assert our_zombies() == []


def test_descendant_that_left_the_session_is_killed_too() -> None:
    stop = Switch()
    lines = Announced(then=stop)
    result = run(
        sh("setsid bash -c 'echo gc $$; exec sleep 60' & wait"),
        b"",
        ENV,
        deadline=time.monotonic() + 30,
        stop=stop,
        on_stdout_line=lines,
    )
    [escaped] = lines.procs
    assert result.killed is KillReason.SHUTDOWN
    assert result.kill_signals == ("SIGTERM",)
    assert_gone(escaped)
    assert our_zombies() == []


def test_command_exiting_leaves_no_background_children() -> None:
    lines = Announced()
    started = time.monotonic()
    result = run(sh("sleep 60 & echo gc $!"), b"", ENV, on_stdout_line=lines)
    # Done when the command exited, not when the sleep (holding stdout) closed it.
    assert time.monotonic() - started < 5
    assert result.exit_code == 0
    assert result.killed is None
    assert result.cleanup_signals == ("SIGTERM",)
    [background] = lines.procs
    assert_gone(background)
    assert our_zombies() == []


def test_reap_group_off_leaves_background_children_alone() -> None:
    lines = Announced()
    started = time.monotonic()
    result = run(sh("sleep 60 & echo gc $!"), b"", ENV, on_stdout_line=lines, reap_group=False)
    assert time.monotonic() - started < 5
    assert result.exit_code == 0
    assert result.cleanup_signals == ()
    [background] = lines.procs
    try:
        assert background.is_running()
    finally:
        background.kill()
        background.wait(5)


def test_stop_event_terminates_with_shutdown_reason() -> None:
    stop = Switch()
    lines = Announced(then=stop)
    result = run(sh("echo gc $$; sleep 60"), b"", ENV, stop=stop, on_stdout_line=lines)
    assert result.killed is KillReason.SHUTDOWN
    assert result.signal == 15
    assert result.kill_signals == ("SIGTERM",)


def test_stop_now_kills_at_once() -> None:
    stop_now = Switch()
    lines = Announced(then=stop_now)
    started = time.monotonic()
    result = run(
        sh("trap '' TERM; echo gc $$; sleep 60"),
        b"",
        ENV,
        grace=30,
        stop_now=stop_now,
        on_stdout_line=lines,
    )
    assert result.killed is KillReason.SHUTDOWN
    assert result.signal == 9
    assert result.kill_signals == ("SIGKILL",)
    assert time.monotonic() - started < 10


def test_stop_now_cuts_the_grace_period_short() -> None:
    stop = Switch()
    stop_now = Switch()
    lines = Announced(then=stop)
    started = time.monotonic()

    def on_kill(name: str) -> None:
        if name == "SIGTERM":
            stop_now.set()  # a second signal to the supervisor while TERM is pending

    result = run(
        sh("trap '' TERM; echo gc $$; sleep 60"),
        b"",
        ENV,
        grace=30,
        stop=stop,
        stop_now=stop_now,
        on_stdout_line=lines,
        on_kill=on_kill,
    )
    assert result.killed is KillReason.SHUTDOWN
    assert result.kill_signals == ("SIGTERM", "SIGKILL")
    assert time.monotonic() - started < 10


def test_failing_callback_kills_and_reaps_the_command() -> None:
    lines = Announced()

    def boom(line: bytes) -> None:
        lines(line)
        raise RuntimeError("callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        run(sh("echo gc $$; exec sleep 60"), b"", ENV, on_stdout_line=boom)
    [command] = lines.procs
    assert_gone(command)


def test_on_started_runs_while_the_command_runs(tmp_path: Path) -> None:
    # The command waits for a file that only on_started creates: it can only end if the
    # callback ran while it was running (and after its stdin was written).
    flag = tmp_path / "started"
    calls: list[int] = []

    def started() -> None:
        calls.append(1)
        flag.touch()

    result = run(
        sh(f"read -r line; while [ ! -e {flag} ]; do sleep 0.01; done; echo $line"),
        b"payload\n",
        ENV,
        deadline=time.monotonic() + 20,
        on_started=started,
    )
    assert (result.exit_code, result.killed, result.stdout_tail) == (0, None, b"payload\n")
    assert calls == [1]


def test_failing_on_started_kills_and_reaps_the_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    def boom() -> None:
        wait_until(
            lambda: pid_file.exists() and pid_file.read_text().strip(),
            10,
            message="the command's pid",
        )
        raise RuntimeError("on_started failed")

    with pytest.raises(RuntimeError, match="on_started failed"):
        run(
            sh(f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 60"),
            b"",
            ENV,
            on_started=boom,
        )
    assert not psutil.pid_exists(int(pid_file.read_text()))  # killed and reaped


# -- adopted orphans -----------------------------------------------------------------------


def test_daemon_left_behind_is_reaped_by_reap_orphans() -> None:
    lines = Announced()
    # The daemon leaves the session, so exiting normally does not clean it up; it outlives
    # the command, is adopted by us (subreaper) and becomes our zombie when it exits.
    result = run(
        sh("setsid bash -c 'echo gc $$; exec sleep 0.3' & sleep 0.1"),
        b"",
        ENV,
        on_stdout_line=lines,
    )
    assert result.exit_code == 0
    [daemon] = lines.procs
    wait_until(
        lambda: daemon.pid in {z.pid for z in our_zombies()},
        timeout=10,
        message="the orphaned daemon to exit and become our zombie",
    )
    assert reap_orphans() >= 1
    assert_gone(daemon)


def test_reap_orphans_leaves_a_running_commands_status_alone(tmp_path: Path) -> None:
    go = tmp_path / "go"

    def on_line(line: bytes) -> None:
        # Runs inside run_command's loop, so it cannot reap the command meanwhile: let the
        # command exit, wait until it is a zombie, and try to steal it.
        command = psutil.Process(int(line.split()[1]))
        go.touch()
        wait_until(lambda: command.status() == psutil.STATUS_ZOMBIE, timeout=10)
        assert reap_orphans() == 0

    script = f"echo gc $$; while [ ! -e {go} ]; do sleep 0.01; done; exit 7"
    result = run(sh(script), b"", ENV, on_stdout_line=on_line)
    assert result.exit_code == 7


# -- OutputStream (pure) ------------------------------------------------------------------


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(min_value=1, max_value=8))
def test_output_stream_pieces_reassemble(chunks: list[bytes], max_line: int) -> None:
    got: list[bytes] = []
    stream = OutputStream(tail_bytes=5, on_line=got.append, max_line_bytes=max_line)
    for chunk in chunks:
        stream.feed(chunk)
    stream.finish()
    data = b"".join(chunks)
    assert all(len(piece) <= max_line for piece in got)
    assert b"".join(got) == data.replace(b"\n", b"")
    assert stream.tail == data[-5:]
    assert stream.total_bytes == len(data)


@given(st.lists(st.binary(max_size=50), max_size=20))
def test_output_stream_lines_match_split(chunks: list[bytes]) -> None:
    got: list[bytes] = []
    stream = OutputStream(tail_bytes=0, on_line=got.append, max_line_bytes=10_000)
    for chunk in chunks:
        stream.feed(chunk)
    stream.finish()
    expected = b"".join(chunks).split(b"\n")
    if expected[-1] == b"":
        expected.pop()  # a final newline ends the last line; it does not start a new one
    assert got == expected
    assert stream.tail == b""


@given(
    st.lists(st.binary(max_size=50), max_size=20),
    st.integers(min_value=1, max_value=12),
)
def test_a_line_budget_hands_on_the_first_lines_and_counts_the_rest(
    chunks: list[bytes], burst: int
) -> None:
    got: list[bytes] = []
    drops: list[int] = []
    budget = LineBudget(rate=1.0, burst=burst, on_drop=drops.append, clock=lambda: 0.0)
    stream = OutputStream(0, on_line=got.append, max_line_bytes=10_000, budget=budget)
    for chunk in chunks:
        stream.feed(chunk)
    stream.finish()
    expected = b"".join(chunks).split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    # The clock stands still: exactly ``burst`` lines, the first ones; the rest counted.
    assert got == expected[:burst]
    assert budget.dropped == sum(drops) == len(expected) - len(got)


def test_a_line_budget_refills_at_its_rate() -> None:
    now = [0.0]
    budget = LineBudget(rate=10.0, burst=5, clock=lambda: now[0])
    got: list[bytes] = []
    stream = OutputStream(0, on_line=got.append, budget=budget)
    stream.feed(b"x\n" * 8)
    assert (len(got), budget.dropped) == (5, 3)
    now[0] = 0.25  # 2.5 lines' worth
    stream.feed(b"y\n" * 4)
    assert (got[5:], budget.dropped) == ([b"y", b"y"], 5)
    now[0] = 100.0  # never more than the burst at once
    stream.feed(b"z\n" * 9)
    assert (got[7:], budget.dropped) == ([b"z"] * 5, 9)
    with pytest.raises(ValueError):
        LineBudget(rate=0, burst=5)


def test_a_full_line_budget_left_alone_grants_one_burst_not_two() -> None:
    now = [0.0]
    budget = LineBudget(rate=10.0, burst=5, clock=lambda: now[0])
    got: list[bytes] = []
    stream = OutputStream(0, on_line=got.append, budget=budget)
    now[0] = 100.0  # full all along
    stream.feed(b"x\n" * 12)
    assert (len(got), budget.dropped) == (5, 7)


def test_reap_orphans_with_only_live_children_reaps_nothing() -> None:
    lines = Announced()
    result = run(
        sh("setsid bash -c 'echo gc $$; exec sleep 30' & sleep 0.1"), b"", ENV, on_stdout_line=lines
    )
    assert result.exit_code == 0
    [daemon] = lines.procs
    try:
        assert daemon.status() != psutil.STATUS_ZOMBIE
        assert reap_orphans() == 0
        assert daemon.is_running() and daemon.status() != psutil.STATUS_ZOMBIE
    finally:
        daemon.kill()
    wait_until(
        lambda: reap_orphans() >= 1 or not daemon.is_running(),
        timeout=10,
        message="the killed daemon to be reaped",
    )
    assert_gone(daemon)


def test_a_supervisor_with_stdio_closed_still_gives_the_command_its_pipes(tmp_path: Path) -> None:
    # With 0, 1 and 2 closed, pipe ends land on 0-2 and are moved above 2 before the dup2
    # onto the command's stdio (with other threads' fds interleaved, a dup2 could overwrite
    # an end still to be duplicated); the command must get the right ends all the same.
    out = tmp_path / "result"
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from cmdstalk_py.loop.tools import run\n"
        "from cmdstalk_py.process import run_command\n"
        "os.close(0); os.close(1); os.close(2)\n"
        "r = run(run_command(['/bin/sh', '-c', 'cat; echo err >&2'], b'payload', {}))\n"
        f"fd = os.open({str(out)!r}, os.O_WRONLY | os.O_CREAT, 0o600)\n"
        "os.write(fd, repr((r.exit_code, r.stdout_tail, r.stderr_tail)).encode())\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
    assert out.read_text() == repr((0, b"payload", b"err\n"))
