"""Start-up under load (issue #16 item 12): ``cmdstalk-server`` listens before it loads
anything heavy, and accepts within 100 ms of being spawned with both cores busy."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest

from cmdstalk_py.server.cli import quick_read
from cmdstalk_py.server.flags import build_parser
from tests.helpers import busy_cores, free_port
from tests.server.test_server_cli import talk

SCRIPT = Path(sys.executable).parent / "cmdstalk-server"
SERVER = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "cmdstalk_py.server"]
#: What greenstalk's test suite gives a freshly spawned server.
TARGET = 0.100
#: The bare interpreter listening, as early as a Python server could: the yardstick for a
#: machine so loaded that even this takes longer than TARGET.
BARE = [
    sys.executable, "-c",
    "import _socket, sys, time\n"
    "s = _socket.socket()\n"
    "s.bind(('127.0.0.1', int(sys.argv[-1])))\n"
    "s.listen()\n"
    "time.sleep(60)\n",
]
#: What the server may add to that before it listens, on the busy machine.
OVERHEAD = 0.040


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-p", "11400"],
        ["-l", "0.0.0.0", "-p", "007", "-z", "70000", "-V"],
        ["-l", "unix:/tmp/x.sock", "-b", "/var/lib/q", "-f", "0", "-s", "4096", "-VV"],
        ["-b", "", "-F", "-p", "1", "-p", "2", "-l", "a", "-l", "::1"],
        ["-f", "10", "-F", "-b", "d"],
    ],
)
def test_the_quick_read_agrees_with_argparse(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert quick_read(argv) == (args.listen, args.port, args.binlog_dir or None)


@pytest.mark.parametrize(
    "argv",
    [
        ["-h"], ["--help"], ["-v"], ["-p11300"], ["-p", "+1"], ["-p", "1_0"], ["-p", "70000"],
        ["-p", "٣"], ["-z", "-5"], ["-l"], ["-b"], ["stray"], ["--"], ["-x"], ["-VF"],
        ["-f", "soon"], ["-p=5"],
    ],
)
def test_anything_unusual_is_left_to_argparse(argv: list[str]) -> None:
    assert quick_read(argv) is None


def test_nothing_heavy_is_loaded_before_listening() -> None:
    # Everything before listen() delays the first connection; on a busy machine each
    # module costs several times its idle import time.
    probe = (
        "import sys\n"
        "from cmdstalk_py.server import cli, listen\n"
        "where = cli.quick_read(['-l', 'localhost', '-p', '0'])\n"
        "assert where is not None\n"
        "listen.bind_listener(where[0], where[1]).close()\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(out.stdout.split())
    heavy = {"argparse", "typing", "re", "enum", "socket", "collections", "encodings.idna",
             "signal", "cmdstalk_py.server.config", "cmdstalk_py.client"}
    assert not loaded & heavy, sorted(loaded & heavy)


def seconds_to_first_accept(argv: list[str], serves: bool = True) -> float:
    port = free_port()
    start = time.monotonic()
    proc = subprocess.Popen([*argv, "-p", str(port)], start_new_session=True)
    try:
        while True:
            assert proc.poll() is None, "the server exited"
            assert time.monotonic() - start < 30, "no connection accepted in 30 s"
            with socket.socket() as s:
                try:
                    s.connect(("127.0.0.1", port))
                except OSError:
                    time.sleep(0.001)
                    continue
                accepted = time.monotonic() - start
                s.settimeout(30)
                if serves:
                    assert talk(s, b"list-tube-used\r\n") == b"USING default\r\n"
                return accepted
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_accepts_within_100_ms_with_both_cores_busy() -> None:
    server: list[float] = []
    bare: list[float] = []
    with busy_cores(max(2, os.cpu_count() or 2), limit=120):
        for _ in range(15):  # interleaved: a change in the machine's load hits both alike
            server.append(seconds_to_first_accept(SERVER))
            bare.append(seconds_to_first_accept(BARE, serves=False))
    median, floor = statistics.median(server), statistics.median(bare)
    shown = ", ".join(f"{t * 1000:.0f}" for t in sorted(server))
    # Where other work loads the machine beyond its two busy cores, the bare interpreter
    # alone may take longer than TARGET: then only what the server adds to it counts.
    bound = max(TARGET, floor + OVERHEAD)
    assert median < bound, (
        f"median {median * 1000:.0f} ms (bare interpreter {floor * 1000:.0f} ms);"
        f" all (ms): {shown}"
    )
