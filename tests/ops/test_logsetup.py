"""configure_logging: Go-style text lines and one-object-per-line JSON."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.ops.logsetup import (
    configure_logging,
    iso_utc,
    lean_records,
)
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.joblog import JobLog
from cmdstalk_py.supervisor.results import JobResult, Outcome

BROKER_EXTRA = {"tube": "mail", "slot": 2, "job_id": 17, "event": "deleted"}
TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_text_format_has_go_style_prefix() -> None:
    out = io.StringIO()
    configure_logging("text", "INFO", out)
    logging.getLogger("cmdstalk.broker").info("exit 0, deleted", extra=BROKER_EXTRA)
    logging.getLogger("cmdstalk.broker").info("reserving", extra={"tube": "mail", "slot": 0})
    logging.getLogger("cmdstalk").warning("plain %s", "line")
    lines = out.getvalue().splitlines()
    assert re.fullmatch(TS + r" INFO \[mail:2\] job 17 exit 0, deleted", lines[0]), lines[0]
    assert re.fullmatch(TS + r" INFO \[mail:0\] reserving", lines[1]), lines[1]
    assert re.fullmatch(TS + r" WARNING plain line", lines[2]), lines[2]


def test_lean_records_keep_both_formats_intact() -> None:
    saved = (logging._srcfile, logging.logThreads, logging.logProcesses,
             logging.logMultiprocessing)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    try:
        lean_records()
        for fmt in ("text", "json"):
            out = io.StringIO()
            configure_logging(fmt, "INFO", out)
            logging.getLogger().addHandler(Keep())
            logging.getLogger("cmdstalk.broker").info("exit 0, deleted", extra=BROKER_EXTRA)
            line = out.getvalue().splitlines()[0]
            if fmt == "text":
                assert re.fullmatch(TS + r" INFO \[mail:2\] job 17 exit 0, deleted", line), line
            else:
                assert json.loads(line)["job_id"] == 17
        # What the records no longer compute: the caller, thread and process names.
        assert seen[0].funcName != "test_lean_records_keep_both_formats_intact"
        assert seen[0].threadName is None and seen[0].processName is None
    finally:
        (logging._srcfile, logging.logThreads, logging.logProcesses,
         logging.logMultiprocessing) = saved


def test_json_format_one_object_per_line() -> None:
    out = io.StringIO()
    configure_logging("json", "DEBUG", out)
    log = logging.getLogger("cmdstalk.broker")
    log.debug("exit 0, deleted", extra=BROKER_EXTRA)
    log.info("multi\nline message")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed", extra={"tube": "t", "slot": 0})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    first, second, third = (json.loads(line) for line in lines)
    assert list(first) == ["ts", "level", "logger", "msg", "tube", "slot", "job_id", "event"]
    assert first["level"] == "DEBUG" and first["logger"] == "cmdstalk.broker"
    assert {k: first[k] for k in BROKER_EXTRA} == BROKER_EXTRA
    assert re.fullmatch(TS, first["ts"])
    assert list(second) == ["ts", "level", "logger", "msg"]
    assert second["msg"] == "multi\nline message"
    assert "RuntimeError: boom" in third["exc"] and third["tube"] == "t"


def test_level_filters_and_reconfigure_replaces_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("text", "warning", first)
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").warning("shown")
    configure_logging("text", "INFO", second)
    logging.getLogger("x").info("only in second")
    assert "hidden" not in first.getvalue() and "shown" in first.getvalue()
    assert "only in second" not in first.getvalue()
    assert second.getvalue().count("only in second") == 1


@pytest.mark.parametrize(("fmt", "level"), [("xml", "INFO"), ("text", "LOUD")])
def test_rejects_unknown_format_and_level(fmt: str, level: str) -> None:
    with pytest.raises(ValueError):
        configure_logging(fmt, level, io.StringIO())


def test_iso_utc_milliseconds() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"
    assert iso_utc(1795262950.1239) == "2026-11-21T12:09:10.123Z"
    assert iso_utc(1795262950.9999996) == "2026-11-21T12:09:11.000Z"  # rounds to the µs first


@given(
    st.one_of(
        st.floats(min_value=0, max_value=4e9, allow_nan=False),
        st.builds(
            lambda s, f: s + f,
            st.integers(0, 2**32),
            st.sampled_from([0.0, 0.0005, 0.001, 0.999, 0.9995, 0.9999995, 0.0000005]),
        ),
    )
)
def test_iso_utc_matches_datetime(epoch: float) -> None:
    # The per-second cache must render exactly what datetime renders.
    expected = dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds")
    assert iso_utc(epoch) == expected.replace("+00:00", "Z")
    assert iso_utc(epoch) == expected.replace("+00:00", "Z")  # from the cache this time


# -- the direct path for per-job lines ---------------------------------------------------


def _job_lines(joblog: JobLog) -> None:
    """One of each line a broker writes about its jobs."""
    def result(job_id: int, outcome: Outcome, **fields: Any) -> JobResult:
        return JobResult(job_id=job_id, tube="mail", slot=2, outcome=outcome, started_at=1000.0,
                         ended_at=1000.0123, priority=5, ttr=60, releases=0, timeouts=0,
                         reserves=1, age_s=0, payload_bytes=3, **fields)

    joblog.result(result(17, Outcome.DELETED, exit_code=0))
    joblog.result(result(18, Outcome.RELEASED, exit_code=3, release_delay=16))
    joblog.result(result(19, Outcome.TIMEOUT_BURIED, signal=9))
    joblog.result(result(20, Outcome.LOST, error="NOT_FOUND on delete"))
    on_line = joblog.line_logger(21, "stdout")
    assert on_line is not None
    on_line(b"100% done, \xff r\xc3\xa9sum\xc3\xa9\r\n")
    joblog.kill_reporter(21)("SIGTERM")


def _without_ts(line: str, fmt: str) -> object:
    if fmt == "json":
        obj = json.loads(line)
        assert re.fullmatch(TS, obj.pop("ts"))
        return obj
    ts, rest = line.split(" ", 1)
    assert re.fullmatch(TS, ts)
    return rest


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_job_lines_in_both_formats(fmt: str) -> None:
    root = logging.getLogger()
    root.handlers[:] = []  # pytest's capture handlers: only ours
    out = io.StringIO()
    configure_logging(fmt, "INFO", out)
    _job_lines(JobLog("mail", 2, Observer()))
    lines = out.getvalue().splitlines()
    assert len(lines) == 6
    for line in lines:
        _without_ts(line, fmt)  # every line carries its timestamp
    if fmt == "text":
        assert lines[0].endswith(" INFO [mail:2] job 17 exit 0, deleted in 12 ms")
        assert lines[3].endswith(" WARNING [mail:2] job 20 not run, lost in 12 ms "
                                 "(NOT_FOUND on delete)")
        assert lines[4].endswith(" INFO [mail:2] job 21 stdout: 100% done, \ufffd résumé")
        assert lines[5].endswith(" WARNING [mail:2] job 21 sent SIGTERM")
    else:
        assert json.loads(lines[1])["msg"] == "exit 3, released with delay 16s in 12 ms"
        assert json.loads(lines[5])["event"] == "kill"
        assert {json.loads(x)["logger"] for x in lines} == {"cmdstalk.broker", "cmdstalk.output"}


def test_a_line_that_cannot_be_written_is_reported_by_logging(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    root.handlers[:] = []
    out = io.StringIO()
    configure_logging("text", "INFO", out)
    out.close()
    logging.getLogger("cmdstalk.broker").info("exit 0, deleted", extra=BROKER_EXTRA)
    err = capsys.readouterr().err
    assert "--- Logging error ---" in err and "exit 0, deleted" in err
