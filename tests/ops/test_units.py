"""The shipped systemd units and supervisord.conf: valid for their tools, and every flag in
them accepted by the real ``cmdstalk`` and ``cmdstalk-server``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import accepts_connections, free_port, wait_until
from tests.ops.units import (
    ENV_EXAMPLE,
    SERVER_UNIT,
    SHIPPED_BIN,
    SUPERVISORD_CONF,
    VENV_BIN,
    WORKER_UNIT,
    cmdstalk_envvars,
    exec_argv,
    read_env_file,
    read_unit,
)


def seconds(value: str) -> float:
    """A systemd time span of one unit (``10min``, ``30s``, ``2``) in seconds."""
    for suffix, factor in (("min", 60), ("ms", 0.001), ("s", 1), ("h", 3600)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not here")
@pytest.mark.parametrize(
    ("unit", "name"), [(WORKER_UNIT, "cmdstalk@pool.service"), (SERVER_UNIT, SERVER_UNIT.name)]
)
def test_systemd_analyze_verify(unit: Path, name: str, tmp_path: Path) -> None:
    # verify insists that ExecStart's binary exists: point it at this run's virtualenv.
    (tmp_path / name).write_text(unit.read_text().replace(SHIPPED_BIN, str(VENV_BIN)))
    out = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / name)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (out.returncode, out.stderr) == (0, "")


def test_worker_unit_settings() -> None:
    svc = read_unit(WORKER_UNIT)["Service"]
    assert (svc["Type"], svc["NotifyAccess"], svc["KillMode"]) == ("notify", "main", "mixed")
    assert svc["KillSignal"] == "SIGTERM"
    assert svc["EnvironmentFile"] == "/etc/cmdstalk/%i.env"
    assert svc["Restart"] == "on-failure"
    assert seconds(svc["TimeoutStopSec"]) >= 300  # above common TTRs (120 s) with room
    assert 0 < seconds(svc["WatchdogSec"]) <= 120
    assert svc["NoNewPrivileges"] == "yes" and svc["ProtectSystem"] == "full"
    assert svc["PrivateTmp"] == "yes"
    # systemd's default soft limit (1024) is what a flood of idle sockets used up (issue 27)
    assert int(svc["LimitNOFILE"]) >= 65536
    argv = exec_argv(read_unit(WORKER_UNIT), "pool", {})
    assert argv[0] == f"{SHIPPED_BIN}/cmdstalk"
    assert f"/var/log/{svc['LogsDirectory']}/pool.events.jsonl" in argv


def test_server_unit_settings() -> None:
    svc = read_unit(SERVER_UNIT)["Service"]
    assert svc["StateDirectory"] == "cmdstalk-server"
    argv = exec_argv(read_unit(SERVER_UNIT), "", {})
    assert argv[0] == f"{SHIPPED_BIN}/cmdstalk-server"
    assert argv[argv.index("-b") + 1] == "/var/lib/cmdstalk-server"
    assert argv[argv.index("-l") + 1] == "127.0.0.1"


def test_env_example_names_only_real_options() -> None:
    text = ENV_EXAMPLE.read_text()
    # Commented-out examples must be right too.
    names = set(read_env_file(ENV_EXAMPLE)) | {
        line.lstrip("#").partition("=")[0]
        for line in text.splitlines()
        if line.startswith("#CMDSTALK_")
    }
    known = cmdstalk_envvars()
    assert {"CMDSTALK_ADDRESS", "CMDSTALK_CMD", "CMDSTALK_EVENTS"} <= known
    assert names - {"CMDSTALK_ARGS"} <= known, names - known


def test_worker_unit_flags_parse_in_the_real_cli() -> None:
    env = read_env_file(ENV_EXAMPLE) | {"CMDSTALK_ARGS": "--max-jobs 1000"}
    argv = exec_argv(read_unit(WORKER_UNIT), "pool", env)
    assert argv[-2:] == ["--max-jobs", "1000"]
    # click rejects an unknown option (exit 2) before it acts on --help.
    out = subprocess.run(
        [str(VENV_BIN / "cmdstalk"), *argv[1:], "--help"], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    bogus = subprocess.run(
        [str(VENV_BIN / "cmdstalk"), *argv[1:], "--no-such-flag", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bogus.returncode == 2  # the check above can fail


@pytest.fixture
def server_proc() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def start_server(argv: list[str], procs: list[subprocess.Popen[bytes]], port: int) -> bool:
    """Start ``argv``; True once it accepts connections, False if it exits first."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    procs.append(proc)
    wait_until(
        lambda: proc.poll() is not None or accepts_connections("127.0.0.1", port),
        timeout=20, message=f"{argv} listening or exited",
    )  # fmt: skip
    return proc.poll() is None


def test_server_unit_command_runs(
    tmp_path: Path, server_proc: list[subprocess.Popen[bytes]]
) -> None:
    argv = exec_argv(read_unit(SERVER_UNIT), "", {})
    port = free_port()
    argv[0] = str(VENV_BIN / "cmdstalk-server")
    argv[argv.index("-p") + 1] = str(port)
    argv[argv.index("-b") + 1] = str(tmp_path)
    if start_server(argv, server_proc, port):
        return
    # Until the binlog lands, -b must be refused with a clear message (not run in memory);
    # everything else in the unit must then work.
    output = server_proc[-1].stdout.read().decode() if server_proc[-1].stdout else ""
    assert server_proc[-1].returncode != 0 and ("-b" in output or "binlog" in output), output
    i = argv.index("-b")
    del argv[i : i + 2]
    assert start_server(argv, server_proc, port), "cmdstalk-server with the unit's other flags"


def supervisord_programs(env: dict[str, str]) -> dict[str, object]:
    from supervisor.options import ServerOptions  # type: ignore[import-untyped]

    old = dict(os.environ)
    os.environ.update(env)
    try:
        opts = ServerOptions()
        opts.realize(["-c", str(SUPERVISORD_CONF)])
    finally:
        os.environ.clear()
        os.environ.update(old)
    return {p.name: p for g in opts.process_group_configs for p in g.process_configs}


def sv_env(tmp_path: Path, server_port: int = 11300) -> dict[str, str]:
    return {
        "CMDSTALK_BIN": str(VENV_BIN), "CMDSTALK_VAR": str(tmp_path),
        "CMDSTALK_ADDRESS": "127.0.0.1:11300", "CMDSTALK_SERVER_PORT": str(server_port),
    }  # fmt: skip


def test_supervisord_conf_stop_settings(tmp_path: Path) -> None:
    import signal

    programs = supervisord_programs(sv_env(tmp_path))
    assert set(programs) == {"cmdstalk", "cmdstalk-server"}
    worker = programs["cmdstalk"]
    assert worker.stopsignal == signal.SIGTERM  # type: ignore[attr-defined]
    assert worker.stopwaitsecs >= 300  # type: ignore[attr-defined]
    assert worker.killasgroup and worker.stopasgroup  # type: ignore[attr-defined]
    assert worker.autorestart  # type: ignore[attr-defined]
    server = programs["cmdstalk-server"]
    assert server.priority < worker.priority  # type: ignore[attr-defined]
    assert worker.command.split()[0] == f"{VENV_BIN}/cmdstalk"  # type: ignore[attr-defined]
    assert server.command.split()[0] == f"{VENV_BIN}/cmdstalk-server"  # type: ignore[attr-defined]


def test_supervisord_conf_needs_its_variables(tmp_path: Path) -> None:
    env = sv_env(tmp_path)
    del env["CMDSTALK_BIN"]
    saved = os.environ.pop("CMDSTALK_BIN", None)
    try:
        with pytest.raises((ValueError, SystemExit)):
            supervisord_programs(env)
    finally:
        if saved is not None:
            os.environ["CMDSTALK_BIN"] = saved


def test_supervisord_commands_run(
    tmp_path: Path, server_proc: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    programs = supervisord_programs(sv_env(tmp_path, port))
    worker_argv = programs["cmdstalk"].command.split()  # type: ignore[attr-defined]
    out = subprocess.run([*worker_argv, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    server_argv = programs["cmdstalk-server"].command.split()  # type: ignore[attr-defined]
    assert start_server(server_argv, server_proc, port), "the [program:cmdstalk-server] command"


def test_env_example_starts_without_optional_extras() -> None:
    """As shipped, the example must not ask for an extra (a unit without it would crash-loop)."""
    env = read_env_file(ENV_EXAMPLE)
    assert "CMDSTALK_METRICS" not in env
    assert "#CMDSTALK_METRICS=" in ENV_EXAMPLE.read_text()  # still shown, commented out
