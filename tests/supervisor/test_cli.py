"""The command line: Go and GNU spellings, environment variables, validation, --version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from cmdstalk_py import __version__
from cmdstalk_py.supervisor.cli import command, normalize_args
from tests.supervisor.conftest import cmdstalk_env


def parse(args: list[str]) -> dict[str, Any]:
    """The parameters click would call ``command`` with for ``args``."""
    ctx = command.make_context("cmdstalk", normalize_args(args))
    return ctx.params


@pytest.fixture(autouse=True)
def _no_cmdstalk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("CMDSTALK_"):
            monkeypatch.delenv(name)


def test_defaults_are_go_defaults() -> None:
    p = parse(["--cmd", "cat"])
    assert p["address"] == ("127.0.0.1", 11300)
    assert (p["per_tube"], p["tubes"], p["all_tubes"]) == (1, ("default",), False)
    assert p["shell"] == ("/bin/bash", "-c")
    assert (p["max_releases"], p["max_timeouts"], p["backoff_exponent"]) == (10, 1, 4.0)
    assert p["discover_interval"] <= 10
    assert p["batch_scheduling"] is False  # opt-in: measured on one kind of machine only


GO = ["-address=10.0.0.5:11301", "-all", "-cmd=tr a-z A-Z", "-per-tube=6", "-tubes=a,b"]
GO_SPACED = ["-address", "10.0.0.5:11301", "-all", "-cmd", "tr a-z A-Z", "-per-tube", "6",
             "-tubes", "a,b"]
GNU = ["--address", "10.0.0.5:11301", "--all", "--cmd", "tr a-z A-Z", "--per-tube", "6",
       "--tubes", "a,b"]
GNU_EQ = ["--address=10.0.0.5:11301", "--all", "--cmd=tr a-z A-Z", "--per-tube=6", "--tubes=a,b"]


@pytest.mark.parametrize("args", [GO, GO_SPACED, GNU, GNU_EQ], ids=["go", "go-spaced", "gnu",
                                                                    "gnu-eq"])
def test_go_and_gnu_spellings_parse_alike(args: list[str]) -> None:
    p = parse(args)
    assert p["address"] == ("10.0.0.5", 11301)
    assert p["all_tubes"] is True
    assert p["cmd"] == "tr a-z A-Z"
    assert p["per_tube"] == 6
    assert p["tubes"] == ("a", "b")


def test_go_boolean_values_and_dash_values() -> None:
    assert parse(["-cmd=x", "-all=true"])["all_tubes"] is True
    assert parse(["-cmd=x", "-all=false"])["all_tubes"] is False
    # A value is never rewritten, even when it looks like one of our options.
    assert parse(["-cmd", "-all"])["cmd"] == "-all"
    assert parse(["--cmd", "-per-tube=3"])["cmd"] == "-per-tube=3"
    assert normalize_args(["-h"]) == ["-h"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-addres=127.0.0.1:11300", "-cmd=cat"],
         "No such option '--addres'. Did you mean '--address'?"),
        (["-cmd", "cat", "-per-tub", "3"],
         "No such option '--per-tub'. (Did you mean one of: '--per-tube',"),
        (["-cmd=cat", "-tubez=a"], "No such option '--tubez'. (Did you mean one of:"),
    ],
)
def test_a_misspelt_go_option_is_named_with_the_option_meant(
    args: list[str], said: str
) -> None:
    with pytest.raises(click.NoSuchOption) as info:
        parse(args)
    assert info.value.format_message().startswith(said)


def test_a_dash_number_and_a_short_option_are_not_long_options() -> None:
    assert normalize_args(["-1", "-h", "-x"]) == ["-1", "-h", "-x"]


def test_a_misspelt_go_option_on_the_real_command_is_one_error_and_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cmdstalk_py", "-addres=127.0.0.1:11300", "-cmd=cat"],
        capture_output=True, text=True, timeout=60, env=cmdstalk_env(),
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: No such option '--addres'. Did you mean '--address'?"]


def test_every_option_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "CMDSTALK_ADDRESS": "h:1",
        "CMDSTALK_ALL": "1",
        "CMDSTALK_CMD": "cat",
        "CMDSTALK_PER_TUBE": "3",
        "CMDSTALK_TUBES": "x,y",
        "CMDSTALK_DISCOVER_INTERVAL": "0.5",
        "CMDSTALK_MAX_RELEASES": "4",
        "CMDSTALK_MAX_TIMEOUTS": "2",
        "CMDSTALK_BACKOFF_EXPONENT": "2",
        "CMDSTALK_BACKOFF_MAX": "60",
        "CMDSTALK_KILL_GRACE": "5",
        "CMDSTALK_TTR_MARGIN": "0.5",
        "CMDSTALK_SHELL": "/bin/sh -c",
        "CMDSTALK_BURY_EXIT_CODES": "65,78",
        "CMDSTALK_OUTPUT_RATE": "250",
        "CMDSTALK_MAX_JOBS": "100",
        "CMDSTALK_SHUTDOWN_TIMEOUT": "30",
        "CMDSTALK_BATCH_SCHEDULING": "true",
        "CMDSTALK_EMBEDDED": "true",
        "CMDSTALK_EMBEDDED_MAX_JOB_SIZE": "1000000",
        "CMDSTALK_BINLOG": "/var/lib/q",
        "CMDSTALK_BINLOG_FSYNC": "0",
        "CMDSTALK_BINLOG_NO_FSYNC": "true",
        "CMDSTALK_BINLOG_SIZE": "1048576",
        "CMDSTALK_LOG_FORMAT": "json",
        "CMDSTALK_LOG_LEVEL": "debug",
        "CMDSTALK_EVENTS": "-",
        "CMDSTALK_METRICS": "127.0.0.1:9100",
        "CMDSTALK_HTTP": ":8080",
        "CMDSTALK_HTTP_TOKEN": "secret",
        "CMDSTALK_HTTP_ALLOW_HOST": "dash.example 10.0.0.7",
        "CMDSTALK_CHECK": "true",
        "CMDSTALK_ON_EXIT": "75=release 64-65=bury,3=delete",
        "CMDSTALK_ON_TIMEOUT": "release",
        "CMDSTALK_BACKOFF_JITTER": "true",
        "CMDSTALK_KEEP_ALIVE": "true",
        "CMDSTALK_MAX_RUNTIME": "3600",
        "CMDSTALK_WORKERS": "4",
        "CMDSTALK_TUBE_LIMIT": "x=2 y=1",
        "CMDSTALK_TUBE_RATE": "x=5/s:10",
        "CMDSTALK_MAX_MEMORY": "512M",
        "CMDSTALK_MAX_CPU": "30",
        "CMDSTALK_MAX_PROCS": "50",
        "CMDSTALK_ON_LIMIT": "Release",
        "CMDSTALK_LIMITS_VIA": "Proc",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    p = parse([])
    assert p == {
        "address": ("h", 1),
        "all_tubes": True,
        "cmd": "cat",
        "per_tube": 3,
        "tubes": ("x", "y"),
        "discover_interval": 0.5,
        "max_releases": 4,
        "max_timeouts": 2,
        "backoff_exponent": 2.0,
        "backoff_max": 60,
        "kill_grace": 5.0,
        "ttr_margin": 0.5,
        "shell": ("/bin/sh", "-c"),
        "bury_exit_codes": frozenset({65, 78}),
        "output_rate": 250,
        "max_jobs": 100,
        "shutdown_timeout": 30.0,
        "batch_scheduling": True,
        "embedded": True,
        "embedded_max_job_size": 1000000,
        "binlog": "/var/lib/q",
        "binlog_fsync": 0,
        "binlog_no_fsync": True,
        "binlog_size": 1048576,
        "log_format": "json",
        "log_level": "DEBUG",
        "events": "-",
        "metrics": "127.0.0.1:9100",
        "http": ":8080",
        "http_token": "secret",
        "http_allow_host": ("dash.example", "10.0.0.7"),
        "config_file": None,
        "check": True,
        "on_exit": ((3, "delete"), (64, "bury"), (65, "bury"), (75, "release")),
        "on_timeout": "release",
        "backoff_jitter": True,
        "keep_alive": True,
        "max_runtime": 3600.0,
        "workers": 4,
        "tube_limits": (("x", 2), ("y", 1)),
        "tube_rates": (("x", 5.0, 10.0),),
        "max_memory": 512 << 20,
        "max_cpu": 30.0,
        "max_procs": 50,
        "on_limit": "release",
        "limits_via": "proc",
    }
    # The command line wins over the environment.
    assert parse(["-per-tube=2"])["per_tube"] == 2
    # With a config file, the file sets the pools: their variables give way, the rest stay.
    monkeypatch.setenv("CMDSTALK_CONFIG", "/etc/cmdstalk/pools.toml")
    p = parse([])
    assert p["config_file"] == Path("/etc/cmdstalk/pools.toml")
    assert (p["address"], p["per_tube"], p["cmd"], p["tube_limits"]) == (
        ("127.0.0.1", 11300), 1, None, ()
    )
    assert (p["max_jobs"], p["log_level"], p["http"]) == (100, "DEBUG", ":8080")


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        (["--cmd", ""], "--cmd"),
        (["--cmd", "x", "--per-tube", "0"], "--per-tube"),
        (["-cmd=x", "-per-tube=0"], "--per-tube"),
        (["--cmd", "x", "--tubes", "ok,bad name"], "invalid tube name"),
        (["--cmd", "x", "--tubes", "-leading"], "invalid tube name"),
        (["--cmd", "x", "--address", "nohost"], "malformed address"),
        (["--cmd", "x", "--address", "h:99999"], "malformed address"),
        (["--cmd", "x", "--bury-exit-codes", "0"], "invalid exit code"),
        (["--cmd", "x", "--on-exit", "3=explode"], "invalid exit rule"),
        (["--cmd", "x", "--on-exit", "256=bury"], "invalid exit code"),
        (["--cmd", "x", "--on-exit", "9-3=bury"], "invalid exit code"),
        (["--cmd", "x", "--on-timeout", "delete"], "--on-timeout"),
        (["--cmd", "x", "--max-runtime", "0"], "--max-runtime"),
        (["--per-tube", "2"], "--cmd"),
        (["--cmd", "x", "--nope"], "--nope"),
    ],
)
def test_bad_flags_fail_with_usage_error(args: list[str], mentions: str) -> None:
    with pytest.raises(click.UsageError) as info:
        parse(args)
    assert info.value.exit_code == 2
    assert mentions in info.value.format_message()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmdstalk_py", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=cmdstalk_env(),
    )


def test_bad_flags_from_a_real_process_exit_2_with_one_error_line() -> None:
    proc = _cli("-cmd=x", "-per-tube=0")
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--per-tube" in errors[0]
    assert "Traceback" not in proc.stderr


def test_version_and_help() -> None:
    proc = _cli("--version")
    assert proc.returncode == 0 and __version__ in proc.stdout
    proc = _cli("-h")
    assert proc.returncode == 0
    for option in ("--address", "--all", "--cmd", "--per-tube", "--tubes", "CMDSTALK_CMD"):
        assert option in proc.stdout


def test_help_order_survives_the_flag_modules() -> None:
    """The options live in several modules (embedflags, opsflags, poolflags, fateflags);
    ``--help`` still lists them in the order users know."""
    longs = [
        next(o for o in p.opts if o.startswith("--"))
        for p in command.params
        if isinstance(p, click.Option) and p.name not in ("help", "version")
    ]
    assert longs == [
        "--address", "--all", "--cmd", "--per-tube", "--tubes", "--discover-interval",
        "--max-releases", "--max-timeouts", "--backoff-exponent", "--backoff-max",
        "--kill-grace", "--ttr-margin", "--shell", "--bury-exit-codes", "--output-rate",
        "--max-jobs",
        "--shutdown-timeout", "--batch-scheduling", "--embedded", "--embedded-max-job-size",
        "--binlog", "--binlog-fsync", "--binlog-no-fsync", "--binlog-size", "--log-format",
        "--log-level", "--events", "--metrics", "--workers", "--tube-limit", "--tube-rate",
        "--http", "--http-token", "--http-allow-host", "--config", "--check", "--on-exit",
        "--on-timeout", "--backoff-jitter", "--keep-alive", "--max-runtime", "--max-memory",
        "--max-cpu", "--max-procs", "--on-limit", "--limits-via",
    ]
