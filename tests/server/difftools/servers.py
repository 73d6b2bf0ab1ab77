"""Fresh servers for differential runs: the real beanstalkd and the bundled one.

The real binary is started here rather than through ``tests.helpers.running_beanstalkd``
for two reasons: readiness is polled through the process's listening socket (psutil), so
no probe connection shows up in ``total-connections``; and the pid is kept, so drain mode
can be switched on with SIGUSR1 exactly as an operator would.

``CMDSTALK_DIFF_AGAINST`` picks the server compared with the real beanstalkd:
``bundled`` (``EmbeddedServer``) or ``beanstalkd`` (a second real instance, which is how
the harness itself is checked). Default: ``bundled`` when it is importable.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass

import psutil

from tests.helpers import BeanstalkdNotFound, beanstalkd_path, free_port, wait_until

DEFAULT_MAX_JOB_SIZE = 65535


@dataclass
class Target:
    """A running server: where it listens and how to switch on drain mode."""

    kind: str
    host: str
    port: int
    drain: Callable[[], None] | None = None


def bundled_available() -> bool:
    return importlib.util.find_spec("cmdstalk_py.server.embedded") is not None


def other_kind() -> str:
    """The server compared against the real beanstalkd in this run."""
    wanted = os.environ.get("CMDSTALK_DIFF_AGAINST")
    if wanted:
        if wanted not in ("bundled", "beanstalkd"):
            raise ValueError(f"CMDSTALK_DIFF_AGAINST must be bundled or beanstalkd: {wanted}")
        return wanted
    return "bundled" if bundled_available() else "beanstalkd"


def _listening(proc: psutil.Process, port: int) -> bool:
    try:
        conns = proc.net_connections(kind="tcp4")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in conns)


@contextmanager
def real_beanstalkd(max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> Iterator[Target]:
    """The real binary on 127.0.0.1:<free port>; stopped (TERM, then KILL) on exit."""
    binary = beanstalkd_path()
    if binary is None:
        raise BeanstalkdNotFound()
    # beanstalkd cannot be told to bind port 0 and report it, so pick a free port and
    # retry if someone else takes it first.

    for _attempt in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [binary, "-l", "127.0.0.1", "-p", str(port), "-z", str(max_job_size)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ps = psutil.Process(proc.pid)

            def up(ps: psutil.Process = ps, proc: subprocess.Popen[bytes] = proc,
                   port: int = port) -> bool:
                return proc.poll() is not None or _listening(ps, port)

            wait_until(up, timeout=60, interval=0.002,
                       message=f"beanstalkd listening on 127.0.0.1:{port}")
            if proc.poll() is not None:
                continue

            def drain(pid: int = proc.pid) -> None:
                os.kill(pid, signal.SIGUSR1)

            yield Target("beanstalkd", "127.0.0.1", port, drain)
            return
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    raise RuntimeError("could not start beanstalkd on a free port")


@contextmanager
def bundled_server(max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> Iterator[Target]:
    """The bundled ``EmbeddedServer`` on 127.0.0.1, port 0."""
    from cmdstalk_py.server.embedded import (  # type: ignore[import-not-found,unused-ignore]
        EmbeddedServer,
    )

    with EmbeddedServer(host="127.0.0.1", port=0, max_job_size=max_job_size) as srv:
        host, port = srv.address
        yield Target("bundled", host, port, srv.drain)


def start(kind: str, max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> AbstractContextManager[Target]:
    """A context manager running a fresh server of ``kind``."""
    if kind == "beanstalkd":
        return real_beanstalkd(max_job_size)
    if kind == "bundled":
        return bundled_server(max_job_size)
    raise ValueError(kind)


@contextmanager
def server_pair(max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> Iterator[tuple[Target, Target]]:
    """(real beanstalkd, the other kind), both fresh."""
    with ExitStack() as stack:
        real = stack.enter_context(start("beanstalkd", max_job_size))
        other = stack.enter_context(start(other_kind(), max_job_size))
        yield real, other
