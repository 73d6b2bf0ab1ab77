"""Shared test helpers: waiting for conditions with a deadline, free ports, servers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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


def beanstalkd_path() -> str | None:
    """The real beanstalkd binary: ``$BEANSTALKD_PATH``, else the one on PATH."""
    return os.environ.get("BEANSTALKD_PATH") or shutil.which("beanstalkd")


def _exited_or_listening(proc: subprocess.Popen[bytes], port: int) -> Callable[[], bool]:
    return lambda: proc.poll() is not None or accepts_connections("127.0.0.1", port)


@contextmanager
def running_beanstalkd(*extra_args: str, port: int | None = None) -> Iterator[BeanstalkServer]:
    """Start the real beanstalkd on 127.0.0.1, wait until it accepts, stop it in finally."""
    binary = beanstalkd_path()
    if binary is None:
        raise RuntimeError("beanstalkd binary not found (set BEANSTALKD_PATH)")
    for attempt in range(3):
        p = port if port is not None else free_port()
        proc = subprocess.Popen(
            [binary, "-l", "127.0.0.1", "-p", str(p), *extra_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_until(
                _exited_or_listening(proc, p),
                timeout=5,
                message=f"beanstalkd on 127.0.0.1:{p}",
            )
            if proc.poll() is not None:
                # Lost the race for the port to someone else: try another one.
                if attempt < 2 and port is None:
                    continue
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"beanstalkd exited with {proc.returncode}: {err}")
            server = BeanstalkServer("beanstalkd", "127.0.0.1", p)
            try:
                yield server
            finally:
                server.close_clients()
            return
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stderr:
                proc.stderr.close()
    raise RuntimeError("could not start beanstalkd on a free port")
