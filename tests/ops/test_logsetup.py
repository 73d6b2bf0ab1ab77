"""configure_logging: Go-style text lines and one-object-per-line JSON."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.logsetup import configure_logging, iso_utc, lean_records

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
