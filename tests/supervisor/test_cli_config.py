"""``cmdstalk --config FILE [--check]`` through the real command (issue #18, item 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import greenstalk
import pytest

from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import cmdstalk_env, start_cmdstalk

REPO = Path(__file__).resolve().parents[2]


def cmdstalk(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmdstalk_py", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=cmdstalk_env(**env),
    )


def error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("Error:")]


@pytest.fixture
def pools_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pools.toml"
    yield path


def test_check_accepts_the_example_and_prints_every_pool() -> None:
    proc = cmdstalk("--config", str(REPO / "examples" / "pools.toml"), "--check")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "3 pools, valid" in out
    assert "[pools.quick]" in out and "[pools.background]" in out and "[pools.reports]" in out
    assert "slow.sh, flaky.py" in out and "3 shared by all tubes" in out
    assert "slow.sh=1" in out and "flaky.py=2/s burst 4" in out
    assert "report.*" in out and "2 per tube" in out
    assert "APP_ENV=example, REPORT_FORMAT=json" in out


def test_check_in_go_spelling_and_from_the_environment() -> None:
    example = str(REPO / "examples" / "pools.toml")
    assert cmdstalk(f"-config={example}", "-check").returncode == 0
    proc = cmdstalk(CMDSTALK_CONFIG=example, CMDSTALK_CHECK="1")
    assert proc.returncode == 0 and "[pools.quick]" in proc.stdout


def test_check_shows_supervisor_wide_flags_are_not_pool_keys(pools_file: Path) -> None:
    pools_file.write_text('[pools.one]\ncommand = "cat"\ntubes = ["a"]\n')
    proc = cmdstalk("--config", str(pools_file), "--check", "--max-jobs", "5", "--log-level",
                    "debug")
    assert proc.returncode == 0, proc.stderr
    assert "max_jobs" not in proc.stdout and "1 pool, valid" in proc.stdout


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("[pools.x]\ncommand = 'c'\nworkers =\n", "line 3"),
        ("[pools.x]\ncommand = 'c'\nmax_relases = 3\n", "pools.x.max_relases: unknown key"),
        ("[pools.x]\ncommand = 'c'\nworkers = -2\n", "pools.x.workers: -2 is not in the range"),
        ("[pools.x]\ncommand = 'c'\ntubes = ['b@d']\n", "pools.x.tubes: invalid tube name"),
        # Issue #27, item 5: malformed files, each one line too (no traceback).
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", ": not valid TOML: arrays or inline tables"),
        ("[pools.x]\ncommand = 'caf\udcff'\n", ": not UTF-8 at line 2, column 15"),
        ('[pools."\\u001b[2J"]\ncommand = "c"\n', 'pools."\\u001B[2J": a pool name'),
        ('[pools.x]\ncommand = "c"\n"\\u001b[2J" = 1\n', 'pools.x."\\u001B[2J": unknown key'),
        ('[pools.x]\ncommand = "c\\u0000"\n', "pools.x.command: the command contains a NUL"),
        ('[pools.x]\ncommand = "c"\nenv = { A = "\\u0000" }\n', "pools.x.env.A: the value"),
    ],
)
def test_a_bad_file_is_one_error_line_and_exit_2(
    pools_file: Path, text: str, mentions: str
) -> None:
    pools_file.write_bytes(text.encode("utf-8", "surrogateescape"))
    for args in (["--check"], []):  # the same whether checking or starting
        proc = cmdstalk("--config", str(pools_file), *args)
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1
        (line,) = error_lines(proc)
        assert line.startswith(f"Error: {pools_file}: ") and mentions in line


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-large"])
def test_a_file_that_is_no_regular_file_of_bounded_size_exits_2(
    pools_file: Path, kind: str
) -> None:
    if kind == "fifo":
        os.mkfifo(pools_file)
    elif kind == "dev-zero":
        pools_file.symlink_to("/dev/zero")
    else:
        pools_file.write_text("#" * (1024 * 1024) + "\n")
    proc = cmdstalk("--config", str(pools_file), "--check")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert line.startswith(f"Error: {pools_file}: ")
    assert ("not a regular file" if kind != "too-large" else "larger than 1048576") in line


def test_check_shows_escape_sequences_escaped(pools_file: Path) -> None:
    pools_file.write_text(
        '[pools.x]\ncommand = "echo \\u001b[31mred\\nnext"\nenv = { A = "\\u009b2J" }\n'
    )
    proc = cmdstalk("--config", str(pools_file), "--check")
    assert proc.returncode == 0, proc.stderr
    assert all(line.isprintable() for line in proc.stdout.splitlines())
    assert "  echo \\u001B[31mred\\u000Anext" in proc.stdout and "A=\\u009B2J" in proc.stdout


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    proc = cmdstalk("--config", str(tmp_path / "absent.toml"), "--check")
    assert proc.returncode == 2 and "absent.toml" in error_lines(proc)[0]


@pytest.mark.parametrize(
    ("args", "env", "mentions"),
    [
        (["--per-tube", "2"], {}, "--per-tube"),
        (["-tubes=a"], {}, "--tubes"),
        (["--cmd", "cat"], {}, "--cmd"),
        (["--address", "127.0.0.1:1"], {"CMDSTALK_ADDRESS": "127.0.0.1:1"}, "--address"),
    ],
)
def test_pool_flags_beside_config_are_refused(
    pools_file: Path, args: list[str], env: dict[str, str], mentions: str
) -> None:
    pools_file.write_text('[pools.one]\ncommand = "cat"\n')
    proc = cmdstalk("--config", str(pools_file), "--check", *args, **env)
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert mentions in line and "pool option" in line


def test_pool_variables_beside_config_are_ignored_and_listed(pools_file: Path) -> None:
    """One shell serves cmdstalk-ctl (CMDSTALK_ADDRESS) and cmdstalk --config: the file sets
    the pools, a pool option's variable is ignored (even a value its flag would refuse), a
    supervisor-wide variable still applies."""
    pools_file.write_text('[pools.one]\ncommand = "cat"\naddress = "127.0.0.1:11301"\n')
    proc = cmdstalk(
        "--config", str(pools_file), "--check",
        CMDSTALK_ADDRESS="10.9.9.9:1", CMDSTALK_TUBES="other", CMDSTALK_PER_TUBE="many",
        CMDSTALK_CMD="false", CMDSTALK_MAX_JOBS="0",
    )
    assert proc.returncode == 2 and "--max-jobs" in error_lines(proc)[0]  # still read
    proc = cmdstalk(
        "--config", str(pools_file), "--check",
        CMDSTALK_ADDRESS="10.9.9.9:1", CMDSTALK_TUBES="other", CMDSTALK_PER_TUBE="many",
        CMDSTALK_CMD="false",
    )
    assert proc.returncode == 0, proc.stderr
    ignored = "ignored (the file sets pool options): "
    assert (
        f"{ignored}CMDSTALK_ADDRESS, CMDSTALK_CMD, CMDSTALK_PER_TUBE, CMDSTALK_TUBES"
        in proc.stdout.splitlines()
    )
    assert "127.0.0.1:11301" in proc.stdout and "10.9.9.9" not in proc.stdout
    (tubes,) = [line.split() for line in proc.stdout.splitlines() if line.startswith("  tubes")]
    assert tubes == ["tubes", "default"]
    assert cmdstalk("--config", str(pools_file), "--check").stdout.count(ignored) == 0


def test_check_without_config_and_no_cmd_are_usage_errors() -> None:
    proc = cmdstalk("--check", "--cmd", "cat")
    assert proc.returncode == 2 and "--check needs --config" in error_lines(proc)[0]
    proc = cmdstalk()
    assert proc.returncode == 2 and "Missing option '--cmd'" in error_lines(proc)[0]


def test_pools_from_the_file_run_and_sighup_reloads_them(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    """Two pools (shared workers with a limit, cwd and env; per-tube), then SIGHUP: a bad
    file is logged and the pools kept; a new file starts its pool and retires the old."""
    server, out, work = beanstalk, tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    pools = tmp_path / "pools.toml"
    pools.write_text(
        f'address = "{server.address}"\nshell = ["/bin/sh", "-c"]\n'
        '[pools.a]\ntubes = ["cfg.a"]\nworkers = 2\ncwd = "work"\nenv = { GREETING = "hi" }\n'
        f'command = \'echo "$GREETING $(pwd)" > {out}/a-$CMDSTALK_JOB_ID\'\n'
        '[pools.a.limits]\n"cfg.a" = 1\n'
        f'[pools.b]\ntubes = ["cfg.b"]\ncommand = "cat > {out}/b-$CMDSTALK_JOB_ID"\n'
    )
    client = server.client()
    a_ids = {put(client, "cfg.a", "x") for _ in range(3)}
    b_id = put(client, "cfg.b", "b")
    stderr = (tmp_path / "stderr").open("wb")
    proc = start_cmdstalk("--config", str(pools), stderr=stderr, stdout=subprocess.DEVNULL)
    try:
        # The shell creates each file before its command writes it: wait for the content.
        wait_until(lambda: sum(f.stat().st_size > 0 for f in out.iterdir()) == 4, timeout=30)
        for job_id in a_ids:
            assert (out / f"a-{job_id}").read_text() == f"hi {work}\n"
        assert (out / f"b-{b_id}").read_text() == "b"
        # The start-up line names every pool, not the first alone.
        started = (tmp_path / "stderr").read_text()
        assert ": 2 pools\n" in started
        assert f"pool a: tubes cfg.a on {server.address}, 2 shared worker(s) per server" in started
        assert f"pool b: tubes cfg.b on {server.address}, 1 per tube, cmd 'cat > " in started

        pools.write_text('[pools.a]\nworkers = -1\n')  # bad: logged, the pools kept
        proc.send_signal(signal.SIGHUP)
        log = tmp_path / "stderr"
        wait_until(lambda: b"reload failed, keeping the running pools" in log.read_bytes(), 15)
        again = put(client, "cfg.b", "again")
        wait_until(lambda: (out / f"b-{again}").exists(), timeout=15)

        pools.write_text(
            f'address = "{server.address}"\n'
            f'[pools.c]\ntubes = ["cfg.c"]\ncommand = "cat > {out}/c-$CMDSTALK_JOB_ID"\n'
        )
        proc.send_signal(signal.SIGHUP)
        c_id = put(client, "cfg.c", "c")
        wait_until(lambda: (out / f"c-{c_id}").exists(), timeout=15)
        # The removed pools stopped watching: nobody serves cfg.a or cfg.b any more.
        wait_until(lambda: watching(client, "cfg.a") == watching(client, "cfg.b") == 0, 15)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        stderr.close()
    assert proc.returncode == 0


def put(client: greenstalk.Client[Any], tube: str, body: str) -> int:
    client.use(tube)
    return client.put(body)


def watching(client: greenstalk.Client[Any], tube: str) -> int:
    try:
        return int(client.stats_tube(tube)["current-watching"])
    except greenstalk.NotFoundError:
        return 0  # the tube is gone: nobody watches it


def test_one_pool_from_the_file_runs_its_jobs(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    server = beanstalk
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "pools.toml").write_text(
        f'address = "{server.address}"\n'
        "[pools.writer]\n"
        'tubes = ["poolfile"]\n'
        f'command = "cat > {out}/$CMDSTALK_JOB_ID"\n'
        'shell = ["/bin/sh", "-c"]\n'
    )
    client = server.client(use="poolfile")
    ids = {client.put(f"job {i}") for i in range(3)}
    proc = start_cmdstalk("--config", str(tmp_path / "pools.toml"))
    try:
        wait_until(lambda: {int(p.name) for p in out.iterdir()} == ids, timeout=30)
        wait_until(lambda: all(p.read_text().startswith("job") for p in out.iterdir()), timeout=10)
        assert sorted(p.read_text() for p in out.iterdir()) == ["job 0", "job 1", "job 2"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
