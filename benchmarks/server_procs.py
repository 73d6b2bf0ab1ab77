"""Server processes for benchmarks/server.py: start, sample CPU and memory, stop.

Both servers run as real subprocesses on 127.0.0.1 and a free port, exactly as a user would
start them, so the figures include everything a client would see.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# The launcher is shared with the tests (tests/helpers.py): one way to start a server.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# ServerStartError and free_port are re-exported for the benchmark scripts.
from tests.helpers import ServerProcess, start_server_process
from tests.helpers import ServerStartError as ServerStartError
from tests.helpers import busy_cores as busy_cores
from tests.helpers import free_port as free_port

HOST = "127.0.0.1"
START_TIMEOUT = 15.0


@dataclass(frozen=True)
class ServerKind:
    """How to start one implementation: ``argv_prefix`` + ``-l HOST -p PORT`` + extra."""

    name: str  # "beanstalkd" or "bundled"
    argv_prefix: tuple[str, ...]

    def argv(self, port: int, extra: Sequence[str] = ()) -> list[str]:
        return [*self.argv_prefix, "-l", HOST, "-p", str(port), *extra]


def beanstalkd_kind() -> ServerKind | None:
    """The real beanstalkd: ``$BEANSTALKD_PATH`` or the one on PATH."""
    path = os.environ.get("BEANSTALKD_PATH") or shutil.which("beanstalkd")
    return ServerKind("beanstalkd", (path,)) if path else None


def bundled_kind() -> ServerKind:
    """The bundled server through its console script, as users start it.

    Falls back to ``python -m cmdstalk_py.server`` when the script is not installed next to
    this interpreter.
    """
    script = Path(sys.executable).with_name("cmdstalk-server")
    if script.exists():
        return ServerKind("bundled", (str(script),))
    return ServerKind("bundled", (sys.executable, "-m", "cmdstalk_py.server"))


@dataclass
class RunningServer(ServerProcess):
    """A server subprocess that has accepted a connection, with its CPU and memory."""

    kind: ServerKind = field(kw_only=True)
    _ps: psutil.Process = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._ps = psutil.Process(self.proc.pid)

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the server has used so far (all its threads)."""
        t = self._ps.cpu_times()
        return t.user + t.system

    def sched_seconds(self) -> tuple[float, float]:
        """(running, waiting for a CPU) seconds over all the server's threads so far.

        From /proc/PID/task/*/schedstat. Running + waiting close to the wall time means the
        server always had work: it was never idle waiting for the load generator. Falls back
        to (CPU seconds, 0) where schedstat is unavailable.
        """
        run = wait = 0
        try:
            for task in Path(f"/proc/{self.pid}/task").iterdir():
                fields = (task / "schedstat").read_text().split()
                run += int(fields[0])
                wait += int(fields[1])
        except (OSError, IndexError, ValueError):
            return self.cpu_seconds(), 0.0
        return run / 1e9, wait / 1e9

    def rss_bytes(self) -> int:
        """Resident set size now."""
        rss: int = self._ps.memory_info().rss
        return rss

    def check_alive(self) -> None:
        """Raise ServerStartError with the server's stderr if it has exited."""
        if self.proc.poll() is not None:
            raise ServerStartError(
                f"{self.kind.name} exited with {self.proc.returncode}: {self.stderr_tail()}"
            )


def start_server(kind: ServerKind, extra: Sequence[str] = (), attempts: int = 3) -> RunningServer:
    """Start ``kind`` on a free port and wait until it accepts a connection."""
    try:
        started = start_server_process(
            lambda port: kind.argv(port, extra),
            timeout=START_TIMEOUT,
            attempts=attempts,
            interval=0.002,
        )
    except ServerStartError as exc:
        raise ServerStartError(f"{kind.name} did not start: {exc}") from None
    return RunningServer(started.proc, started.port, started.stderr_path, kind=kind)


def startup_seconds(kind: ServerKind, extra: Sequence[str] = ()) -> tuple[float, float]:
    """Seconds from just before Popen to (the first accepted connection, its first reply).

    Connection attempts run back to back (sched_yield between them, so the server being
    measured is not starved of a CPU on a busy machine); a refused connect on loopback takes
    microseconds, so the resolution is far below the figure. The first reply is measured
    too because a server may listen before it can serve: the kernel completes the handshake
    from the listen backlog, and the client then waits for its answer.
    """
    for _ in range(3):
        port = free_port()
        argv = kind.argv(port, extra)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            while proc.poll() is None:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    try:
                        s.connect((HOST, port))
                    except OSError:
                        if time.perf_counter() - t0 > START_TIMEOUT:
                            raise ServerStartError(
                                f"{kind.name} did not accept within {START_TIMEOUT}s"
                            ) from None
                        os.sched_yield()
                        continue
                    accepted = time.perf_counter() - t0
                    s.settimeout(START_TIMEOUT)
                    s.sendall(b"list-tube-used\r\n")
                    reply = b""
                    while not reply.endswith(b"\r\n"):
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        reply += chunk
                    if reply != b"USING default\r\n":
                        raise ServerStartError(f"{kind.name}: first reply was {reply!r}")
                    return accepted, time.perf_counter() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    raise ServerStartError(f"{kind.name} exited before accepting ({' '.join(argv)})")


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot (for 'other load' figures)."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))
