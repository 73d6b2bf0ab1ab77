"""What every job cost (#29 item 3) in ``show --events`` and ``tail``: the figures a real
supervisor wrote, in the wording of its own log line; records of older schemas and records
with hostile figures shown without them; ``tail --min-memory`` / ``--min-cpu``."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cmdstalk_py.ops.eventlog import EventLog, event_record
from tests.ctl.run import ctl, out
from tests.helpers import BeanstalkServer
from tests.ops.test_events import result
from tests.supervisor.conftest import start_cmdstalk

MB = 1 << 20
WIDE = 200  # columns: a job line with every figure fits
COST = re.compile(r"(\d+ MiB peak), (\d+\.\d\d s CPU), (\d+ process(?:es)?)")


def _supervised_once(server: BeanstalkServer, events: Path) -> tuple[int, str]:
    """One job run by the real ``cmdstalk`` under a memory limit (so that its tree is
    sampled: peak and processes are known); its id and the supervisor's stderr."""
    job_id = server.client(use="cost").put(b"x", ttr=60)
    proc = start_cmdstalk(
        "--address", server.address, "--tubes", "cost", "--max-jobs", "1",
        "--cmd", "cat >/dev/null; sleep 1", "--max-memory", "1G", "--events", str(events),
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=60)  # --max-jobs 1: it exits after the job
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return job_id, stderr.decode()


def test_show_and_tail_say_what_the_supervisors_log_line_says(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    job_id, stderr = _supervised_once(beanstalk, events)
    logged = COST.search(stderr)
    assert logged is not None, stderr
    tailed = out(ctl(None, "tail", str(events), "--no-follow", columns=WIDE))
    shown = out(ctl(beanstalk.address, "show", str(job_id), "--events", str(events)))
    for text in (tailed, shown):
        found = COST.search(text)
        assert found is not None, text
        # The event log keeps CPU seconds to 3 decimals: its 2-decimal wording may round
        # apart from the log line's; memory and processes are the same integers.
        assert (found[1], found[3]) == (logged[1], logged[3]), (text, stderr)
    assert f"job {job_id} deleted (exit 0, " in tailed
    record = json.loads(out(ctl(None, "tail", str(events), "--no-follow", "--json")))
    assert record["peak_memory_bytes"] > 0 and record["procs"] >= 1
    assert logged[1] == f"{record['peak_memory_bytes'] / MB:.0f} MiB peak"


def _write(events: Path, *records: dict[str, object]) -> None:
    """``records`` in ``events`` as the supervisor's own ``EventLog`` writes them."""
    log = EventLog(str(events), "h", 1)
    try:
        for record in records:
            log.write_record(record)
    finally:
        log.close()


def _record(job_id: int, **fields: object) -> dict[str, object]:
    return {**event_record(result(job_id), "h", 1), **fields}


def _older(job_id: int, schema: int) -> dict[str, object]:
    """A record of schema 1 or 2: no figures at all."""
    record = _record(job_id, schema=schema)
    for key in ("peak_memory_bytes", "cpu_s", "procs"):
        del record[key]
    return record


def test_each_known_figure_is_shown_and_nothing_for_an_unknown_one(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    _write(
        events,
        _record(1, peak_memory_bytes=120 * MB, cpu_s=1.523, procs=3),
        _record(2, peak_memory_bytes=5 * MB, cpu_s=0.004, procs=1),
        _record(3, cpu_s=0.25),  # no limit set: only CPU is known
        _record(4),  # not run: nothing known
        _older(5, 1),
        _older(6, 2),
    )
    lines = out(ctl(None, "tail", str(events), "--no-follow", columns=WIDE)).splitlines()
    said = [line.split(" deleted ", 1)[1] for line in lines]
    assert said == [
        "(exit 0, 1500 ms, 120 MiB peak, 1.52 s CPU, 3 processes)",
        "(exit 0, 1500 ms, 5 MiB peak, 0.00 s CPU, 1 process)",
        "(exit 0, 1500 ms, 0.25 s CPU)",
        *["(exit 0, 1500 ms)"] * 3,
    ], lines
    as_json = [json.loads(line) for line in out(ctl(None, "tail", str(events), "--no-follow",
                                                    "--json")).splitlines()]  # fmt: skip
    assert [(r.get("peak_memory_bytes"), r.get("cpu_s"), r.get("procs")) for r in as_json] == [
        (120 * MB, 1.523, 3), (5 * MB, 0.004, 1), (None, 0.25, None), (None, None, None),
        (None, None, None), (None, None, None),
    ]  # fmt: skip
    assert [("cpu_s" in r) for r in as_json] == [True] * 4 + [False] * 2

    def kept(*args: str) -> list[object]:
        lines = out(ctl(None, "tail", str(events), "--no-follow", "--json", *args))
        return [json.loads(line)["job_id"] for line in lines.splitlines()]

    assert kept("--min-memory", "100M") == [1]
    assert kept("--min-memory", "5M") == [1, 2]
    assert kept("--min-cpu", "0.25") == [1, 3]
    assert kept("--min-cpu", "0.01", "--min-memory", "1M") == [1]


def test_show_events_says_what_the_last_run_cost(
    bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    _write(events, _record(41, cpu_s=9.0), _record(41, peak_memory_bytes=300 * MB,
                                                    cpu_s=2.004, procs=12))  # fmt: skip
    shown = out(ctl(bundled_server.address, "show", "41", "--events", str(events)))
    assert "last outcome (2026-11-21T12:09:11.750Z): deleted (exit 0, 1500 ms, 300 MiB peak, " \
           "2.00 s CPU, 12 processes)" in shown  # fmt: skip
    as_json = json.loads(out(ctl(bundled_server.address, "show", "41", "--events",
                                 str(events), "--json")))["event"]  # fmt: skip
    assert (as_json["peak_memory_bytes"], as_json["cpu_s"], as_json["procs"]) == (
        300 * MB, 2.004, 12,
    )  # fmt: skip


#: Figures no supervisor writes: each is left unsaid, and ``--json`` passes it on as it is.
HOSTILE: list[Any] = [
    "120", "", -1, -0.5, float("nan"), float("inf"), float("-inf"), True, 10**30, 1e300,
    10**400, [1], {"bytes": 1}, 2.5,
]  # fmt: skip


def _hostile_records() -> list[dict[str, object]]:
    records = [
        _record(100 + n, peak_memory_bytes=bad, cpu_s=bad, procs=bad, duration_ms=bad)
        for n, bad in enumerate(HOSTILE)
    ]
    held = {"schema": 3, "event": "tube_held", "time": 7, "pool": ["p"], "tube": "t",
            "reason": "rate", "running": None, "rate": "fast", "burst": float("nan")}  # fmt: skip
    return [*records, held]


def _unsaid(n: int) -> str:
    """What is said of the ``n``th hostile record: nothing of its figures but for 2.5, which
    is a sound duration, memory and CPU, but no count of processes."""
    return "(exit 0, 2 ms, 0 MiB peak, 2.50 s CPU)" if HOSTILE[n] == 2.5 else "(exit 0)"


def _clean(result_: subprocess.CompletedProcess[bytes]) -> str:
    assert result_.returncode == 0 and b"Traceback" not in result_.stderr, result_.stderr
    return out(result_)


def test_hostile_figures_are_left_unsaid_without_a_traceback(
    bundled_server: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    _write(events, *_hostile_records())
    lines = _clean(ctl(None, "tail", str(events), "--no-follow", "-n", "100",
                       columns=WIDE)).splitlines()  # fmt: skip
    assert len(lines) == len(HOSTILE) + 1, lines
    said = [_unsaid(n) for n in range(len(HOSTILE))]
    for n, line in enumerate(lines[:-1]):
        assert line.endswith(f"job {100 + n} deleted {said[n]}"), line
    assert lines[-1].endswith("pool ['p']: tube t held back by its rate (None running)")
    for n in range(len(HOSTILE)):
        shown = _clean(ctl(bundled_server.address, "show", str(100 + n), "--events",
                           str(events)))  # fmt: skip
        assert f"): deleted {said[n]}\n" in shown, shown
    filtered = ctl(None, "tail", str(events), "--no-follow", "--min-memory", "1M",
                   "--min-cpu", "0.01")  # fmt: skip
    assert _clean(filtered) == ""  # an untrusted figure reaches no threshold
    as_json = _clean(ctl(None, "tail", str(events), "--no-follow", "-n", "100", "--json"))
    passed = [json.loads(line)["procs"] for line in as_json.splitlines()[:-1]]
    for sent, got in zip(HOSTILE, passed, strict=True):
        assert (math.isnan(got) if sent != sent else got == sent), (sent, got)


@pytest.mark.parametrize(
    "args",
    [
        ("--min-memory", "nan"), ("--min-memory", "-1M"), ("--min-memory", "0"),
        ("--min-memory", "5X"), ("--min-memory", "2P"), ("--min-memory", "1e9"),
        ("--min-cpu", "nan"), ("--min-cpu", "-1"), ("--min-cpu", "inf"), ("--min-cpu", "x"),
        ("--min-cpu", "1e12"),
    ],
)  # fmt: skip
def test_a_bad_threshold_is_one_error_line_and_exit_2(
    args: tuple[str, str], tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    _write(events, _record(1, cpu_s=1.0))
    ran = ctl(None, "tail", str(events), "--no-follow", *args)
    errors = [line for line in ran.stderr.decode().splitlines() if line.startswith("Error:")]
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr
    assert errors[0].startswith(f"Error: Invalid value for '{args[0]}'"), errors
    assert b"Traceback" not in ran.stderr and ran.stdout == b""


def test_why_a_job_was_killed_is_said_as_the_log_line_says_it(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    _write(
        events,
        _record(1, outcome="buried", exit_code=None, signal="SIGTERM", killed="memory",
                peak_memory_bytes=210 * MB),
        _record(2, outcome="buried", exit_code=0, killed="ttr"),  # exited as the kill came
        _record(3, outcome="buried", exit_code=None, signal="SIGKILL", killed="\x1b[2Jx"),
        _record(4, outcome="buried", exit_code=None, signal="SIGSEGV"),  # died on its own
    )  # fmt: skip
    lines = out(ctl(None, "tail", str(events), "--no-follow", columns=WIDE)).splitlines()
    said = [line.split(" buried ", 1)[1] for line in lines]
    assert said == [
        "(killed by SIGTERM (memory), 1500 ms, 210 MiB peak)",
        "(exit 0, killed: ttr, 1500 ms)",
        "(killed by SIGKILL (\\x1b[2Jx), 1500 ms)",  # a hostile reason is escaped
        "(killed by SIGSEGV, 1500 ms)",
    ], lines
