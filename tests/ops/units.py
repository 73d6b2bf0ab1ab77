"""Reading the shipped systemd units, env example and supervisord.conf for the ops tests."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "systemd"
WORKER_UNIT = SYSTEMD / "cmdstalk@.service"
SERVER_UNIT = SYSTEMD / "cmdstalk-server.service"
ENV_EXAMPLE = SYSTEMD / "cmdstalk.env.example"
SUPERVISORD_CONF = ROOT / "supervisord.conf"
SHIPPED_BIN = "/opt/cmdstalk/bin"  # where the units expect the virtualenv
VENV_BIN = Path(sys.executable).parent  # where this test run has the scripts installed


def read_unit(path: Path) -> configparser.ConfigParser:
    """A unit file as sections of keys (case kept; a repeated key keeps its last value)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=value lines as systemd's EnvironmentFile= reads them (no quotes used here)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


def exec_argv(unit: configparser.ConfigParser, instance: str, env: dict[str, str]) -> list[str]:
    """ExecStart= as systemd would run it: %i replaced, $VAR split into words, ${VAR} kept."""
    line = unit["Service"]["ExecStart"].replace("%i", instance)
    argv: list[str] = []
    for word in shlex.split(line):
        if re.fullmatch(r"\$\w+", word):
            argv.extend(env.get(word[1:], "").split())
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return argv


def cmdstalk_envvars() -> set[str]:
    """The CMDSTALK_* variables the real ``cmdstalk --help`` documents."""
    out = subprocess.run(
        [str(VENV_BIN / "cmdstalk"), "--help"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return set(re.findall(r"CMDSTALK_[A-Z_]+", out.stdout))
