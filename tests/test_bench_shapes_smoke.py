"""Smoke test of benchmarks/shapes.py: a quick run names every shape with a ratio to raw;
the poll loop's reply framing; a failing command stops a drain at once (poll loop, own loop
and asyncio shapes); the event-loop payload writer's partial writes and the own loop's
socket connection, on each loop."""

from __future__ import annotations

import importlib
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cmdstalk_py.client.errors import NotFound
from tests.helpers import beanstalkd_path, running_beanstalkd

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SHAPES = ("raw", "threads", "poll-loop", "poll-loop-full", "own-coro", "own-coro-full", "asyncio",
          "asyncio-full")  # fmt: skip
UVLOOP_SHAPES = ("uvloop", "uvloop-full")
needs_beanstalkd = pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found")


def uvloop_installed() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


#: shapes_aio's loop kinds (``LoopKind``) by attribute name.
LOOPS = ["OWN", "ASYNCIO", "UVLOOP"]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/shapes.py as a module (it imports its siblings drain and shapes_loop)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("shapes")


def new_loop(bench: ModuleType, kind: str, failures: list[BaseException]) -> Any:
    """A loop of shapes_aio's ``kind``, its callbacks' exceptions into ``failures``."""
    if kind == "UVLOOP" and not uvloop_installed():
        pytest.skip("uvloop is not installed")
    return getattr(sys.modules["shapes_aio"], kind).new_loop(failures.append)


def run_within(loop: Any, future: Any, seconds: float = 30) -> Any:
    """``future``'s (or task's) result once done, or TimeoutError after ``seconds``."""
    outcome = loop.create_future()  # a task's own exception cannot be set from outside

    def settle(value: object) -> None:
        if not outcome.done():
            outcome.set_result(value)

    future.add_done_callback(settle)
    loop.call_later(seconds, settle, None)
    if loop.run_until_complete(outcome) is None:
        raise TimeoutError(f"not done in {seconds} s")
    return future.result()


@needs_beanstalkd
@pytest.mark.timeout(600)  # a shared machine's load stretches the run
def test_quick_run_names_each_shape_with_a_ratio() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "shapes.py"), "--quick"],
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    summary = out.stdout.split("medians over 1 round(s)")[1]
    uvloop = UVLOOP_SHAPES if uvloop_installed() else ()
    if not uvloop:
        assert "uvloop shapes skipped: uvloop cannot be imported" in out.stdout
    for name in SHAPES + uvloop:
        # name, jobs/s, x raw, CPU µs/job (ours, commands, beanstalkd), CPU x raw, each round's
        number, ratio = r"\d+\.\d", r"(\d+\.\d\d)"
        row = re.search(
            rf"^  {name} +{number} +{ratio} +\d+ +\d+ +\d+ +{ratio}  \({ratio}\)$", summary, re.M
        )
        assert row is not None, out.stdout
        assert all(float(value) > 0 for value in row.groups())
    assert "raw                " in summary and "1.00" in summary


@needs_beanstalkd
@pytest.mark.slow
def test_ablation_names_each_feature_left_out() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "shapes.py"), "--ablate", "--jobs", "20",
         "--rounds", "1"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    summary = out.stdout.split("medians over 1 round(s)")[1]
    for feature in ("env", "group", "log", "pipes", "sentinel", "stats"):
        assert re.search(rf"^  full -{feature} +\d+\.\d +\d+\.\d\d", summary, re.MULTILINE), (
            out.stdout
        )


def test_replies_are_split_once_whole(bench: ModuleType) -> None:
    split_reply = sys.modules["shapes_loop"].split_reply
    assert split_reply(b"RESERVED 7 3\r\nab", b"RESERVED", 2, True) is None
    assert split_reply(b"RESERVED 7 3\r\nabc\r", b"RESERVED", 2, True) is None
    assert split_reply(b"RESERVED 7 3\r\nabc\r\nX", b"RESERVED", 2, True) == (
        [b"7", b"3"], b"abc", b"X",
    )  # fmt: skip
    assert split_reply(b"DELETED", b"DELETED", 0, False) is None
    assert split_reply(b"DELETED\r\n", b"DELETED", 0, False) == ([], b"", b"")
    with pytest.raises(NotFound):
        split_reply(b"NOT_FOUND\r\n", b"DELETED", 0, False)


@needs_beanstalkd
@pytest.mark.parametrize("runner", ["BareRunner", "FullRunner"])
def test_a_failing_command_stops_the_drain_at_once(bench: ModuleType, runner: str) -> None:
    make_runner = partial(getattr(sys.modules["shapes_loop"], runner), argv=["/bin/false"])
    shape = partial(bench.poll_loop_workers, make_runner=make_runner)
    with running_beanstalkd() as server:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="exited with 1"):
            bench.drain_queue(server, bench.CpuMeter(server), shape, 2, 20)
        assert time.monotonic() - started < 30  # not the drain's 600 s timeout


@needs_beanstalkd
@pytest.mark.parametrize(
    "name", ["own-coro", "own-coro-full", "own callbacks", "asyncio", "asyncio-full",
             "asyncio streams", "asyncio sock", "asyncio reader", "asyncio callbacks",
             "asyncio subprocess", "asyncio subprocess-pidfd", "uvloop", "uvloop subprocess"],
)  # fmt: skip
def test_an_event_loop_shape_stops_at_once_on_a_failing_command(
    bench: ModuleType, name: str
) -> None:
    if name.startswith("uvloop") and not uvloop_installed():
        pytest.skip("uvloop is not installed")
    variant = replace(bench.variants()[name], argv=("/bin/false",))
    shape = partial(bench.event_loop_workers, variant=variant)
    # The command's failure, not the drain's "not drained" after its timeout.
    with running_beanstalkd() as server, pytest.raises(RuntimeError, match="exited with 1"):
        bench.drain_queue(server, bench.CpuMeter(server), shape, 2, 20)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_payload_bigger_than_the_pipe_is_written_whole(bench: ModuleType, kind: str) -> None:
    payload = os.urandom(1 << 20)  # 16 pipe buffers: the first write takes only part
    failures: list[BaseException] = []
    loop = new_loop(bench, kind, failures)
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    received = bytearray()
    over = loop.create_future()

    def readable() -> None:
        chunk = os.read(read_end, 1 << 16)
        received.extend(chunk)
        if not chunk:
            loop.remove_reader(read_end)
            over.set_result(None)

    try:
        reactor = sys.modules["shapes_aio"].LoopReactor(loop)
        loop.add_reader(read_end, readable)
        reactor.write_payload(write_end, payload)
        run_within(loop, over)
        assert bytes(received) == payload
        assert not reactor.writing  # the write end was closed: that is how EOF came
        assert failures == []
    finally:
        os.close(read_end)
        loop.close()


@pytest.mark.parametrize("kind", LOOPS)
def test_a_command_that_reads_nothing_costs_no_error(bench: ModuleType, kind: str) -> None:
    loop = new_loop(bench, kind, [])
    read_end, write_end = os.pipe()
    os.close(read_end)  # the command exited without reading its stdin
    try:
        reactor = sys.modules["shapes_aio"].LoopReactor(loop)
        reactor.write_payload(write_end, b"x" * 100)
        with pytest.raises(OSError):
            os.fstat(write_end)  # closed
        assert not reactor.writing
    finally:
        loop.close()


@pytest.mark.parametrize("kind", LOOPS)
def test_the_reader_connection_joins_split_replies_and_sees_the_peer_close(
    bench: ModuleType, kind: str
) -> None:
    failures: list[BaseException] = []
    loop = new_loop(bench, kind, failures)
    ours, server = socket.socketpair()
    ours.setblocking(False)
    conn = sys.modules["shapes_aio"].ReaderConnection(loop, ours)

    async def talk() -> object:
        server.sendall(b"RESERVED 7 5\r\nhel")  # the rest comes after the first read
        loop.call_later(0.05, server.sendall, b"lo\r\n")
        reply = await conn.request(b"reserve\r\n", b"RESERVED", 2, True)
        assert server.recv(64) == b"reserve\r\n"
        loop.call_later(0.05, server.close)  # while the next request waits
        with pytest.raises(ConnectionError, match="beanstalkd closed a connection"):
            await conn.request(b"delete 7\r\n", b"DELETED", 0, False)
        return reply

    try:
        assert run_within(loop, loop.create_task(talk())) == ([b"7", b"5"], b"hello")
        assert failures == []
    finally:
        conn.close()
        server.close()
        loop.close()
