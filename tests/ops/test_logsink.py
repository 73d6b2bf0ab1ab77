"""SinkHandler on a real pipe: emit never blocks, losses are counted and reported in place."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

import pytest

from cmdstalk_py.ops.logsetup import TextFormatter
from cmdstalk_py.ops.logsink import SinkHandler
from tests.helpers import wait_until


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    try:
        yield r, w
    finally:
        with contextlib.suppress(OSError):  # a test may have closed it
            os.close(r)
        # A writer a test left stalled now fails with EPIPE and ends; until then the write
        # end stays open, so its number cannot name the next test's pipe under it.
        wait_until(_no_writer_thread, 10, message="log writer threads to end")
        with contextlib.suppress(OSError):
            os.close(w)


def _no_writer_thread() -> bool:
    return not any(t.name == "cmdstalk-log-writer" for t in threading.enumerate())


def _logger(handler: logging.Handler) -> logging.Logger:
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger(f"test.logsink.{id(handler)}")
    logger.propagate = False
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    return logger


def _read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = bytearray()
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
    except BlockingIOError:
        pass
    return bytes(out)


def test_a_pipe_nobody_reads_never_blocks_the_logging_thread(pipe: tuple[int, int]) -> None:
    r, w = pipe
    handler = SinkHandler(w, limit=64 * 1024, linger=0.5)
    logger = _logger(handler)
    try:
        started = time.monotonic()
        for i in range(20000):  # ~1.4 MB: the pipe (64 KiB) and the queue fill up
            logger.info("line %d of a flood that nobody reads", i)
        assert time.monotonic() - started < 30
        assert handler.dropped_total > 0
        dropped = handler.dropped_total
        # Reading again: what was queued arrives, then the next line is preceded by the count.
        data = bytearray()

        def read_until(marker: bytes) -> bool:
            data.extend(_read_available(r))
            return marker in data

        wait_until(lambda: read_until(b"nobody reads") and handler.idle(), 10)
        logger.info("after the stall")
        wait_until(lambda: read_until(b"after the stall"), 10, message="the next line")
        lines = data.decode().splitlines()
        assert all(" INFO " in x or " WARNING " in x for x in lines)  # whole lines only
        notice = [x for x in lines if "log lines dropped" in x]
        # Every drop is counted in a notice: one, or more when the writer thread got a
        # turn while the flood went on (a busy machine's scheduling decides).
        counts = [int(x.split(" WARNING ")[1].split(" log lines dropped")[0]) for x in notice]
        assert notice and sum(counts) == dropped, notice
        assert lines[-2] == notice[-1] and lines[-1].endswith("after the stall")
    finally:
        handler.close()


def test_close_waits_at_most_linger_for_a_stalled_sink(pipe: tuple[int, int]) -> None:
    _, w = pipe
    handler = SinkHandler(w, limit=256 * 1024, linger=0.3)
    logger = _logger(handler)
    for i in range(5000):
        logger.info("stalled %d %s", i, "x" * 40)
    started = time.monotonic()
    handler.flush()
    handler.close()
    assert time.monotonic() - started < 3


def test_close_writes_everything_and_reports_pending_drops(pipe: tuple[int, int]) -> None:
    r, w = pipe
    handler = SinkHandler(w, limit=4096, linger=5)
    logger = _logger(handler)
    _fill(w)  # the writer's first write blocks
    for i in range(500):
        logger.info("queued %d", i)
    assert handler.dropped_total > 0
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(_drain(r)), daemon=True)
    reader.start()
    handler.close()
    os.close(w)
    reader.join(10)
    text = got.decode().lstrip("~")
    assert text.splitlines()[-1].endswith(f"{handler.dropped_total} log lines dropped: "
                                          "the log sink was not keeping up")


def _drain(fd: int) -> bytes:
    out = bytearray()
    while chunk := os.read(fd, 65536):
        out += chunk
    return bytes(out)


def test_a_broken_sink_counts_its_losses(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.close(r)  # EPIPE on every write
    handler = SinkHandler(w, linger=1)
    logger = _logger(handler)
    logger.info("lost")
    wait_until(lambda: handler.dropped_total == 1, 5, message="the loss counted")
    handler.close()


def _record(name: str, msg: str) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": name, "msg": msg, "levelno": logging.INFO, "levelname": "INFO"}
    )


def test_an_output_flood_leaves_room_for_the_lines_about_jobs(pipe: tuple[int, int]) -> None:
    r, w = pipe
    handler = SinkHandler(w, limit=64 * 1024, linger=5)
    handler.setFormatter(TextFormatter())
    _fill(w)
    try:
        for i in range(5000):
            handler.handle(_record("cmdstalk.output", f"stdout: flood {i:05d} " + "x" * 40))
        flooded = handler.dropped_total
        assert flooded > 0
        handler.handle(_record("cmdstalk.broker", "exit 0, deleted"))
        handler.handle(_record("cmdstalk.broker", "sent SIGTERM"))
        assert handler.dropped_total == flooded  # both kept although output is dropped
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(_drain(r)), daemon=True)
        reader.start()
        handler.close()
        os.close(w)
        reader.join(10)
        lines = got.decode().lstrip("~").splitlines()
        # The loss is reported where it happened, before the first line that got through.
        assert lines[-3].endswith(f"{flooded} log lines dropped: the log sink was not keeping up")
        assert lines[-2].endswith("exit 0, deleted") and lines[-1].endswith("sent SIGTERM")
    finally:
        handler.close()


def _fill(fd: int) -> None:
    """Fill the pipe ``fd`` writes to, so the writer thread's next write blocks."""
    os.set_blocking(fd, False)
    try:
        while True:
            os.write(fd, b"~" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(fd, True)


def test_lines_logged_at_a_steady_pace_share_writes(pipe: tuple[int, int]) -> None:
    """The writer lets lines gather after each write: a line per job, jobs a millisecond
    apart, and the sink (and the writer's thread) is woken a few times, not per line."""
    r, w = pipe
    writes: list[int] = []

    class Counting(SinkHandler):
        def _write(self, lines: list[bytes]) -> None:
            writes.append(len(lines))
            super()._write(lines)

    handler = Counting(w, gather=0.01)
    logger = _logger(handler)
    try:
        started = time.monotonic()
        for i in range(100):
            logger.info("job %d done", i)
            time.sleep(0.001)  # the pace of the lines, not a wait for a condition
        elapsed = time.monotonic() - started
        data = bytearray()

        def read_all() -> bool:
            data.extend(_read_available(r))
            return data.count(b"\n") == 100

        wait_until(read_all, 10, message="every line written")
        # One write per gathering period at most (plus the first line, written at once).
        assert sum(writes) == 100
        assert len(writes) <= elapsed / 0.01 + 2, (len(writes), elapsed)
    finally:
        handler.close()


def test_a_filling_queue_ends_the_pause(pipe: tuple[int, int]) -> None:
    """Lines past a quarter of the queue wake the writer at once, however long its pause:
    a command flooding its output is written on, not held back to be dropped."""
    r, w = pipe
    handler = SinkHandler(w, limit=64 * 1024, gather=60.0)
    logger = _logger(handler)
    got = bytearray()

    def read_until(count: int) -> bool:
        got.extend(_read_available(r))
        return got.count(b"\n") >= count

    try:
        logger.info("first line")  # written at once; then the writer pauses for a minute
        wait_until(lambda: read_until(1), 10, message="the first line")
        for i in range(400):  # ~26 KB: past a quarter of the queue from line ~250 on
            logger.info("flood line %05d with some padding to make it longer", i)
        # The lines up to a quarter go out at once (the rest may gather for the next pause).
        wait_until(lambda: read_until(201), 10, message="the flood, well before the pause ends")
        assert handler.dropped_total == 0
    finally:
        handler.close()
