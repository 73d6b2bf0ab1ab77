"""Shared test helpers: waiting for conditions with a deadline, free ports, servers."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import greenstalk

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not become true before its deadline."""


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 5.0,
    interval: float = 0.005,
    message: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Raises WaitTimeout (an AssertionError, so pytest shows it as a failure) naming
    ``message`` and the last value seen when ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() >= deadline:
            raise WaitTimeout(
                f"timed out after {timeout:.1f}s waiting for {message}; last={last!r}"
            )
        time.sleep(interval)
        last = predicate()
    return last


# Ports handed out by free_port: below the kernel's ephemeral range (where it picks the
# local port of every outgoing connection), so no client socket of a parallel test can take
# one between free_port() and the server's bind.
_PORTS_LOW = 10000
_rng = random.Random()  # its own: tests that seed the global generator stay reproducible


def ephemeral_low() -> int:
    """The lowest port the kernel may give an outgoing connection."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def worker_ports() -> range:
    """This pytest-xdist worker's own slice of the ports (all of them outside xdist)."""
    high = ephemeral_low()
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    size = (high - _PORTS_LOW) // max(count, 1)
    return range(_PORTS_LOW + index * size, _PORTS_LOW + (index + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    Drawn from this worker's slice (see ``worker_ports``), so two parallel workers never
    pick the same one; the kernel's choice only if the slice is empty or all taken.
    """
    ports = worker_ports()
    for _ in range(min(len(ports), 50)):
        port = _rng.choice(ports)
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


def accepts_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class BeanstalkServer:
    """A running beanstalkd-protocol server that a test can talk to."""

    kind: str  # "beanstalkd" (the real binary) or "bundled" (cmdstalk-server)
    host: str
    port: int
    _clients: list[greenstalk.Client[Any]] = field(default_factory=list, repr=False)

    @property
    def address(self) -> str:
        """``host:port``, the form ``cmdstalk --address`` takes."""
        return f"{self.host}:{self.port}"

    def client(
        self, use: str = "default", watch: str | list[str] = "default"
    ) -> greenstalk.Client[Any]:
        """A greenstalk client closed automatically when the test ends."""
        c = greenstalk.Client((self.host, self.port), use=use, watch=watch)
        self._clients.append(c)
        return c

    def raw(self) -> socket.socket:
        """A raw socket for byte-level protocol tests (caller closes it)."""
        return socket.create_connection((self.host, self.port), timeout=5)

    def close_clients(self) -> None:
        for c in self._clients:
            with suppress(OSError):
                c.close()
        self._clients.clear()


class BeanstalkdNotFound(RuntimeError):
    """The real beanstalkd is not installed: tests that need it are skipped (conftest)."""

    def __init__(self) -> None:
        super().__init__(
            "beanstalkd not found: install Debian's beanstalkd or set BEANSTALKD_PATH"
        )


def beanstalkd_path() -> str | None:
    """The real beanstalkd binary: ``$BEANSTALKD_PATH``, else the one on PATH."""
    return os.environ.get("BEANSTALKD_PATH") or shutil.which("beanstalkd")


def _exited_or_listening(proc: subprocess.Popen[bytes], port: int) -> Callable[[], bool]:
    return lambda: proc.poll() is not None or accepts_connections("127.0.0.1", port)


class ServerStartError(RuntimeError):
    """A server process exited, or never accepted a connection, before its deadline."""


@dataclass
class ServerProcess:
    """A server subprocess that has accepted a connection on 127.0.0.1:``port``.

    Its stderr goes to a file rather than a pipe: a long-lived server (a benchmark's) must
    never block on a pipe nobody reads.
    """

    proc: subprocess.Popen[bytes]
    port: int
    stderr_path: Path

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Signal the server (TERM, or KILL for a crash) and reap it; KILL after ``timeout``."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            self.stderr_path.unlink(missing_ok=True)


def start_server_process(
    argv: Callable[[int], Sequence[str]],
    *,
    port: int | None = None,
    timeout: float = 15.0,
    attempts: int = 3,
    interval: float = 0.005,
) -> ServerProcess:
    """Start ``argv(port)`` and poll until it accepts a connection on 127.0.0.1:``port``.

    The port is ``port``, else a free one; a server that exits at once on a port we picked
    most likely lost a race for it with another process (parallel tests), so it is started
    again on another, up to ``attempts`` times. Raises ServerStartError with the server's
    stderr when it exits for good or does not listen within ``timeout`` seconds.
    """
    why = "no attempt made"
    for _ in range(attempts):
        p = port if port is not None else free_port()
        fd, name = tempfile.mkstemp(prefix="server-", suffix=".stderr")
        with os.fdopen(fd, "wb") as err:
            proc = subprocess.Popen(
                list(argv(p)), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
            )
        server = ServerProcess(proc, p, Path(name))
        try:
            wait_until(
                _exited_or_listening(proc, p),
                timeout=timeout,
                interval=interval,
                message=f"{argv(p)[0]} on 127.0.0.1:{p}",
            )
        except WaitTimeout as exc:
            why = f"{exc}: {server.stderr_tail()}"
            server.stop(signal.SIGKILL)
            raise ServerStartError(why) from None
        except BaseException:  # interrupted while waiting: leave no server behind
            server.stop(signal.SIGKILL)
            raise
        if proc.poll() is None:
            return server
        why = f"{' '.join(argv(p))} exited with {proc.returncode}: {server.stderr_tail()}"
        server.stop()
        if port is not None:
            break  # the caller's port: no other one to try
    raise ServerStartError(why)


@contextmanager
def running_beanstalkd(*extra_args: str, port: int | None = None) -> Iterator[BeanstalkServer]:
    """Start the real beanstalkd on 127.0.0.1, wait until it accepts, stop it in finally."""
    binary = beanstalkd_path()
    if binary is None:
        raise BeanstalkdNotFound()
    process = start_server_process(
        lambda p: [binary, "-l", "127.0.0.1", "-p", str(p), *extra_args], port=port, timeout=5
    )
    try:
        server = BeanstalkServer("beanstalkd", "127.0.0.1", process.port)
        try:
            yield server
        finally:
            server.close_clients()
    finally:
        process.stop(timeout=5)


@contextmanager
def busy_cores(count: int | None = None, limit: float = 600) -> Iterator[None]:
    """Keep ``count`` (default: every) cores busy with ``yes > /dev/null`` meanwhile.

    Each hog is also bounded by timeout(1) after ``limit`` seconds, should this process die
    before it stops them. Each runs in its own process group, which timeout runs yes in:
    killing the group stops both (killing timeout alone would leave yes running).
    """
    hogs = [
        subprocess.Popen(["timeout", str(limit), "yes"], stdout=subprocess.DEVNULL,
                         start_new_session=True)
        for _ in range(count or os.cpu_count() or 2)
    ]  # fmt: skip
    try:
        yield
    finally:
        for hog in hogs:
            with suppress(ProcessLookupError):
                os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()


def load_bench(path: Path, name: str) -> ModuleType:
    """A benchmark script under ``benchmarks/`` as a module named ``name`` (its sibling
    modules importable while it loads), for its smoke test."""
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))
