"""The event log on a real full disk (a 64 KiB tmpfs): every record whole or absent, the
loss counted and logged, later records intact (issue #16 item 7)."""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmdstalk_py.ops.eventlog import EventLog
from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import stop_process
from tests.ops.test_cli_ops import CMDSTALK, base_env
from tests.ops.test_events import result

# A record with a 4000-character stdout tail takes about 4.4 KB: 64 KiB hold 14 of them.
TAIL = "o" * 4000
FILLER = 16 * 1024


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_leaves_no_partial_record(
    tiny_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tiny_disk / "events.jsonl"
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * FILLER)  # freed later: room for the disk to recover
    elog = EventLog(str(path), hostname="h", pid=1)
    try:
        with caplog.at_level(logging.WARNING, logger="cmdstalk.events"):
            for job_id in range(1, 21):
                elog.job_finished(result(job_id, stdout_tail=TAIL))
                elog.flush()
            assert elog.lost_total > 0
            raw = path.read_bytes()
            assert raw.endswith(b"\n")  # before: a torn record at the end of the file
            written = [json.loads(line)["job_id"] for line in raw.decode().splitlines()]
            assert written == list(range(1, len(written) + 1))
            assert len(written) + elog.lost_total == 20

            filler.unlink()
            for job_id in (21, 22):
                elog.job_finished(result(job_id, stdout_tail=TAIL))
                elog.flush()
    finally:
        elog.close()
    # Before: the next record was glued onto the torn one, and both were unreadable.
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["job_id"] for r in records] == [*written, 21, 22]
    assert all(r["stdout_tail"] == TAIL for r in records)
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "cannot write records" in m]) == 1
    assert f"writing again after {20 - len(written)} records lost" in " ".join(messages)


def _whole_records(path: Path) -> list[dict[str, object]]:
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), "a torn record at the end"
    return [json.loads(line) for line in raw.decode().splitlines()]


def test_cmdstalk_on_a_full_disk_keeps_running_and_recovers(
    real_beanstalkd: BeanstalkServer, tiny_disk: Path, tmp_path: Path
) -> None:
    events, filler, err = tiny_disk / "events.jsonl", tiny_disk / "filler", tmp_path / "stderr"
    filler.write_bytes(b"\0" * FILLER)
    client = real_beanstalkd.client(use="full")
    with open(err, "wb") as err_file:
        proc = subprocess.Popen(
            [CMDSTALK, "--address", real_beanstalkd.address, "--tubes", "full",
             "--cmd", "head -c 4000 /dev/zero | tr '\\0' o", "--events", str(events)],
            env=base_env(), stdout=subprocess.DEVNULL, stderr=err_file,
        )  # fmt: skip
    try:
        for i in range(20):
            client.put(f"j{i}".encode(), ttr=30)
        wait_until(lambda: client.stats()["cmd-delete"] >= 20, 60, message="20 jobs deleted")
        wait_until(lambda: b"cannot write records" in err.read_bytes(), 10, message="the loss")
        written = _whole_records(events)
        assert 0 < len(written) < 20
        filler.unlink()
        for i in range(2):
            client.put(f"after{i}".encode(), ttr=30)
        wait_until(lambda: b"records lost" in err.read_bytes(), 30, message="the recovery")
        lost = re.search(r"writing again after (\d+) records lost", err.read_text())
        assert lost is not None
        wait_until(
            lambda: len(_whole_records(events)) == 22 - int(lost[1]), 30, message="the records"
        )
        records = _whole_records(events)
        assert {21, 22} <= {r["job_id"] for r in records}
        assert all(r["stdout_tail"] == TAIL for r in records)
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        stop_process(proc)
