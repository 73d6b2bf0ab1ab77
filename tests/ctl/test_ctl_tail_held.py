"""``tail`` over an event log with tube records (held back / servable again): shown in
words, kept by ``--tube`` and ``--held``, left out by ``--outcome`` and ``--failed``; and
``show --events`` still finds a job's record among them."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import IO

from cmdstalk_py.ops.eventlog import encode_line, event_record, tube_record
from cmdstalk_py.ops.observers import TubeHold
from cmdstalk_py.supervisor.results import Outcome
from tests.ctl.run import CTL, ctl, out
from tests.helpers import BeanstalkServer, wait_until
from tests.ops.test_events import result

T = 1795262950.25  # 2026-11-21T12:09:10.250Z


def tube_line(tube: str, reason: str | None, running: int, limit: int | None = None,
              rate: float | None = None) -> bytes:  # fmt: skip
    hold = TubeHold("img", tube, reason, running, limit, rate, None if rate is None else 2.0)
    return encode_line(tube_record(hold, "h", 1, T))


def job_line(job_id: int, tube: str, outcome: Outcome = Outcome.DELETED) -> bytes:
    return encode_line(event_record(result(job_id, tube=tube, outcome=outcome), "h", 1))


def _read_lines(stream: IO[bytes] | None, lines: list[bytes]) -> None:
    assert stream is not None
    for line in stream:
        lines.append(line)


def test_tail_shows_and_filters_tube_records(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(
        tube_line("thumbs", "limit", 2, limit=2) + job_line(1, "thumbs")
        + job_line(2, "mail", Outcome.BURIED) + tube_line("thumbs", None, 1, limit=2)
    )  # fmt: skip
    shown = out(ctl(None, "tail", str(events), "--no-follow")).splitlines()
    assert len(shown) == 4
    stamp = "12:09:10.250 pool img: tube thumbs"
    assert shown[0] == f"{stamp} held back by its limit (2 running, limit 2)"
    assert shown[3] == f"{stamp} servable again (1 running, limit 2)"
    assert "thumbs:1 job 1 deleted" in shown[1] and "mail:1 job 2 buried" in shown[2]

    def kinds(*args: str) -> list[object]:
        lines = out(ctl(None, "tail", str(events), "--no-follow", "--json", *args)).splitlines()
        return [json.loads(line).get("event", json.loads(line).get("job_id")) for line in lines]

    assert kinds("--tube", "thumbs") == ["tube_held", 1, "tube_servable"]
    assert kinds("--held") == ["tube_held", "tube_servable"]
    assert kinds("--held", "--tube", "mail") == []
    assert kinds("--failed") == [2]
    assert kinds("--outcome", "deleted") == [1]


def test_show_finds_a_job_among_tube_records(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(tube_line("mail", "limit", 1, limit=1) + job_line(1, "mail")
                       + tube_line("mail", None, 0, limit=1))  # fmt: skip
    shown = out(ctl(beanstalk.address, "show", "1", "--events", str(events)))
    assert "last outcome (2026-11-21T12:09:11.750Z): deleted" in shown


def test_tail_follows_a_rate_hold(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"")
    proc = subprocess.Popen([CTL, "tail", str(events), "--held"], stdout=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": "120"})  # fmt: skip
    lines: list[bytes] = []
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        with open(events, "ab") as f:
            f.write(job_line(3, "resize") + tube_line("resize", "rate", 0, rate=0.5))
        wait_until(lambda: len(lines) == 1, timeout=30, message="the followed tube record")
        assert lines[0] == (b"12:09:10.250 pool img: tube resize held back by its rate "
                            b"(0 running, rate 0.5/s:2)\n")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)
