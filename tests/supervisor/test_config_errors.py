"""Configuration errors are said once, with a hint: a command that cannot run (exit
126/127, a missing shell) and a server that is down (one warning per outage, not one per
broker per attempt).
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cmdstalk_py.client.outage import OutageReporter
from tests.helpers import (
    BeanstalkServer,
    beanstalkd_path,
    free_port,
    running_beanstalkd,
    wait_until,
)
from tests.supervisor.conftest import read_events, start_cmdstalk


@contextmanager
def cmdstalk(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real ``cmdstalk`` whose stderr goes to a file; stopped hard in ``finally``."""
    err = tmp_path / "stderr.log"
    with err.open("wb") as sink:
        proc = start_cmdstalk(*args, stderr=sink, stdout=subprocess.DEVNULL)
    try:
        yield proc, err
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def lines(path: Path, *words: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if all(w in line for w in words)]


@pytest.mark.parametrize(
    ("cmd_args", "why"),
    [
        (["--cmd", "no-such-command-anywhere"], "exit 127"),
        (["--cmd", "{script}"], "exit 126"),
        (["--cmd", "true", "--shell", "/no/such/shell -c"], "cannot start"),
    ],
    ids=["not-found", "not-executable", "no-shell"],
)
def test_an_unrunnable_command_is_one_error_per_broker_with_a_hint(
    beanstalk: BeanstalkServer, tmp_path: Path, cmd_args: list[str], why: str
) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)  # not executable
    cmd_args = [a.replace("{script}", str(script)) for a in cmd_args]
    client = beanstalk.client(use="cfg")
    for i in range(3):
        client.put(f"job {i}")
    events = tmp_path / "events.jsonl"
    with cmdstalk(
        tmp_path, *cmd_args, "--address", beanstalk.address, "--tubes", "cfg",
        "--per-tube", "2", "--events", str(events), "--backoff-exponent", "0",
    ) as (_proc, err):
        # Each job fails at least twice, on both brokers between them.
        wait_until(lambda: len(read_events(events)) >= 6, 20, message="6 job results")
        errors = lines(err, "ERROR", "the command cannot run")
        assert 1 <= len(errors) <= 2, err.read_text()  # at most once per broker
        assert all(why in e and "check --cmd and --shell, PATH" in e for e in errors), errors
        assert {r["outcome"] for r in read_events(events)} == {"released"}


def test_a_failing_command_that_ran_is_no_configuration_error(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    client = beanstalk.client(use="cfg")
    client.put("x")
    events = tmp_path / "events.jsonl"
    with cmdstalk(
        tmp_path, "--cmd", "exit 3", "--address", beanstalk.address, "--tubes", "cfg",
        "--events", str(events),
    ) as (_proc, err):
        wait_until(lambda: read_events(events), 20, message="a job result")
        assert not lines(err, "the command cannot run"), err.read_text()


@pytest.mark.slow
@pytest.mark.skipif(beanstalkd_path() is None, reason="needs the real beanstalkd")
def test_a_server_outage_is_one_warning_with_the_address_and_a_hint(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    args = ["--cmd", "cat", "--address", address, "--tubes", "a,b,c", "--per-tube", "3",
            "--log-level", "DEBUG"]
    with cmdstalk(tmp_path, *args) as (proc, err):
        # Down from the start: nine brokers retry, each several times.
        wait_until(lambda: len(lines(err, "DEBUG", "cannot connect")) >= 30, 30,
                   message="30 failed attempts")
        with running_beanstalkd(port=port):
            wait_until(lambda: lines(err, "ready:"), 30, message="ready")
            assert len(lines(err, "connected to", "again")) == 1, err.read_text()
        # The server went away under nine connected brokers, and they retry again.
        before = len(lines(err, "DEBUG", "cannot connect"))
        wait_until(lambda: len(lines(err, "DEBUG", "cannot connect")) >= before + 30, 30,
                   message="30 more failed attempts")
        assert proc.poll() is None
    warnings = lines(err, "WARNING")
    connect = [w for w in warnings if "cannot connect" in w]
    assert len(connect) == 2, warnings  # one per outage
    assert all(address in w and "is beanstalkd running? --embedded starts one" in w
               for w in connect)
    assert len([w for w in warnings if "lost" in w]) == 1, warnings


def test_the_reporter_reminds_while_an_outage_lasts() -> None:
    now = [0.0]
    reporter = OutageReporter("h:1", repeat=60, clock=lambda: now[0])
    seen: list[str] = []
    import logging

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(f"{record.levelname} {record.getMessage()}")

    logger = logging.getLogger("cmdstalk.connection")
    handler = Grab(logging.DEBUG)
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        for _ in range(5):
            reporter.failed("a:0", "refused", 0.1)
            now[0] += 20
        reporter.connected("a:1")
        reporter.connected("a:2")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    warnings = [s for s in seen if s.startswith("WARNING")]
    assert len(warnings) == 2 and "still cannot connect to h:1 after 60s" in warnings[1]
    assert [s for s in seen if s.startswith("INFO")] == [
        "INFO connected to h:1 again after 100.0s (5 failed attempts)"
    ]
