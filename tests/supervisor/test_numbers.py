"""Numeric options refuse non-finite and absurd values, from flags and environment alike."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from cmdstalk_py.supervisor.cli import command, normalize_args
from tests.supervisor.conftest import cmdstalk_env

# (option, bad value): each was accepted before, and each broke the supervisor at run time
# (nan grace: every job killed at once and released unrun; inf exponent: a one-second
# backoff forever; nan interval: discovery stops; 1e6 exponent: the first delay overflows).
BAD = [
    ("--kill-grace", "nan"),
    ("--kill-grace", "inf"),
    ("--kill-grace", "1e9"),
    ("--ttr-margin", "nan"),
    ("--ttr-margin", "-inf"),
    ("--backoff-exponent", "inf"),
    ("--backoff-exponent", "nan"),
    ("--backoff-exponent", "1e6"),
    ("--discover-interval", "nan"),
    ("--discover-interval", "inf"),
    ("--shutdown-timeout", "nan"),
    ("--shutdown-timeout", "inf"),
    ("--backoff-max", "99999999999"),
    ("--per-tube", "1000000"),
    ("--max-releases", "1e6"),
]


@pytest.fixture(autouse=True)
def _no_cmdstalk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("CMDSTALK_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("option", "value"), BAD)
def test_flag_rejects(option: str, value: str) -> None:
    with pytest.raises(click.BadParameter) as info:
        command.make_context("cmdstalk", normalize_args(["--cmd", "x", option, value]))
    assert info.value.exit_code == 2
    assert option in info.value.format_message() or option in str(info.value.param_hint)


@pytest.mark.parametrize(("option", "value"), BAD)
def test_environment_rejects(option: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CMDSTALK_" + option[2:].upper().replace("-", "_"), value)
    with pytest.raises(click.BadParameter):
        command.make_context("cmdstalk", ["--cmd", "x"])


def test_sane_values_still_parse() -> None:
    ctx = command.make_context(
        "cmdstalk",
        ["--cmd", "x", "--kill-grace", "0", "--backoff-exponent", "10", "--ttr-margin", "3600",
         "--discover-interval", "0.05", "--shutdown-timeout", "86400", "--per-tube", "1000"],
    )
    assert ctx.params["backoff_exponent"] == 10.0 and ctx.params["per_tube"] == 1000


def _run(args: list[str], extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # A closed port: were the value accepted, cmdstalk would keep retrying until the timeout.
    env = {**cmdstalk_env(), **extra_env}
    return subprocess.run(
        [sys.executable, "-m", "cmdstalk_py", "--cmd", "true", "--address", "127.0.0.1:1",
         *args],
        capture_output=True, text=True, timeout=20, env=env,
    )


@pytest.mark.parametrize(
    ("args", "env", "mentions"),
    [
        (["--kill-grace", "nan"], {}, "--kill-grace"),
        (["-backoff-exponent=inf"], {}, "--backoff-exponent"),
        ([], {"CMDSTALK_DISCOVER_INTERVAL": "nan"}, "--discover-interval"),
        ([], {"CMDSTALK_BACKOFF_EXPONENT": "1e6"}, "--backoff-exponent"),
    ],
    ids=["flag-nan", "go-flag-inf", "env-nan", "env-1e6"],
)
def test_a_real_process_exits_2_with_one_error_line(
    args: list[str], env: dict[str, str], mentions: str
) -> None:
    proc = _run(args, env)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and mentions in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
