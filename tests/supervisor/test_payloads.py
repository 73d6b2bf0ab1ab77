"""Payloads and output at every size reach the command and come back byte-exact."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.results import Outcome
from tests.helpers import BeanstalkServer, running_beanstalkd
from tests.supervisor.conftest import config_for, run_one


@pytest.fixture
def quiet_output() -> Iterator[None]:
    """Job output not logged line by line (20 MB of it would only test the log handler)."""
    logger = logging.getLogger("cmdstalk.output")
    old = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(old)


def test_every_byte_value_arrives_exactly(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 3 + b"\r\n\x00\r\n"
    copy = tmp_path / "copy"
    producer = beanstalk.client(use="bin")
    producer.put(payload, ttr=30)
    broker = Broker(config_for(beanstalk, f"tee {copy} | sha256sum"), "bin", 0)
    result = run_one(broker)
    assert result.outcome is Outcome.DELETED
    assert copy.read_bytes() == payload
    assert result.stdout_tail.split()[0] == hashlib.sha256(payload).hexdigest()
    assert result.payload_bytes == len(payload)


def test_one_mib_payload(quiet_output: None) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, far past the pipe buffer
    with running_beanstalkd("-z", "2000000") as server:
        producer = server.client(use="big")
        producer.put(payload, ttr=30)
        broker = Broker(config_for(server, "sha256sum"), "big", 0)
        result = run_one(broker)
        assert result.outcome is Outcome.DELETED
        assert result.stdout_tail.split()[0] == hashlib.sha256(payload).hexdigest()
        # A command that never reads its stdin is fine too (Go panicked on EPIPE).
        producer.put(payload, ttr=30)
        assert run_one(broker).outcome is Outcome.DELETED


def test_twenty_mb_of_output_does_not_deadlock(
    beanstalk: BeanstalkServer, quiet_output: None
) -> None:
    producer = beanstalk.client(use="loud")
    producer.put(b"x" * 60000, ttr=30)
    cmd = "head -c 20000000 /dev/zero | tr '\\0' 'y'; echo; echo tail-marker"
    broker = Broker(config_for(beanstalk, cmd, tail_bytes=1000), "loud", 0)
    result = run_one(broker, timeout=30)
    assert result.outcome is Outcome.DELETED
    assert result.stdout_tail.endswith("tail-marker\n")
    assert len(result.stdout_tail) == 1000


def test_output_lines_are_logged_with_tube_slot_and_job(
    beanstalk: BeanstalkServer, caplog: pytest.LogCaptureFixture
) -> None:
    producer = beanstalk.client(use="logs")
    job_id = producer.put(b"one\ntwo\n", ttr=30)
    broker = Broker(config_for(beanstalk, "cat; echo oops >&2"), "logs", 3)
    with caplog.at_level(logging.INFO, logger="cmdstalk"):
        run_one(broker)
    lines = [
        (r.getMessage(), getattr(r, "tube", None), getattr(r, "slot", None),
         getattr(r, "job_id", None), getattr(r, "event", None))
        for r in caplog.records
        if r.name == "cmdstalk.output"
    ]
    assert sorted(lines) == sorted([
        ("stdout: one", "logs", 3, job_id, "stdout"),
        ("stdout: two", "logs", 3, job_id, "stdout"),
        ("stderr: oops", "logs", 3, job_id, "stderr"),
    ])
    summary = [r for r in caplog.records if r.name == "cmdstalk.broker"]
    assert [getattr(r, "event", None) for r in summary] == ["deleted"]
