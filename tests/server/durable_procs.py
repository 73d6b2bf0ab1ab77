"""Server processes with a binlog directory, for the durability drills (both kinds)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import accepts_connections, beanstalkd_path, free_port, wait_until

SERVER = [sys.executable, "-m", "cmdstalk_py.server"]
KINDS = ["bundled", "beanstalkd"]


# ------------------------------------------------------------------ processes


@dataclass
class Proc:
    """A server process listening on 127.0.0.1:port."""

    kind: str
    proc: subprocess.Popen[bytes]
    port: int

    def crash(self) -> None:
        """kill -9: nothing is closed, nothing flushed by the server."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def stop(self) -> int:
        """SIGTERM; the exit status (beanstalkd dies of the signal: reported as 0)."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        status = self.proc.wait(timeout=60)
        return 0 if self.kind == "beanstalkd" and status == -signal.SIGTERM else status

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")


def command(kind: str, port: int, directory: Path, flags: tuple[str, ...]) -> list[str]:
    if kind == "beanstalkd":
        binary = beanstalkd_path()
        if binary is None:
            pytest.skip("beanstalkd not found")
        base = [binary]
    else:
        base = SERVER
    return [*base, "-l", "127.0.0.1", "-p", str(port), "-b", str(directory), *flags]


@contextmanager
def server(kind: str, directory: Path, *flags: str) -> Iterator[Proc]:
    """Start ``kind`` with ``-b directory``, wait until it accepts, kill it in finally."""
    for attempt in range(3):
        port = free_port()
        popen = subprocess.Popen(
            command(kind, port, directory, flags), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        p = Proc(kind, popen, port)
        try:
            wait_until(
                _exited_or_listening(popen, port),
                timeout=30, message=f"{kind} accepting on {port}",
            )  # fmt: skip
            if popen.poll() is not None:
                err = p.stderr()
                if attempt < 2 and "listen" in err:
                    continue  # lost the port to someone else
                raise AssertionError(f"{kind} exited with {popen.returncode}: {err}")
            yield p
            return
        finally:
            if popen.poll() is None:
                p.crash()
            if popen.stderr is not None:
                popen.stderr.close()
    raise AssertionError("no free port")


class Conn:
    """A raw protocol connection with a reply reader."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError("server closed the connection")
        self.buf += chunk

    def reply(self) -> tuple[bytes, bytes | None]:
        """(reply line, data chunk for RESERVED/FOUND/OK else None)."""
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        words = line.split(b" ")
        if words[0] not in (b"RESERVED", b"FOUND", b"OK"):
            return line, None
        size = int(words[-1])
        while len(self.buf) < size + 2:
            self._fill()
        data, self.buf = self.buf[:size], self.buf[size + 2 :]
        return line, data

    def do(self, line: bytes, body: bytes | None = None) -> tuple[bytes, bytes | None]:
        self.sock.sendall(line + b"\r\n" + (b"" if body is None else body + b"\r\n"))
        return self.reply()

    def put(self, body: bytes, pri: int = 0, delay: int = 0, ttr: int = 60) -> int:
        line, _ = self.do(b"put %d %d %d %d" % (pri, delay, ttr, len(body)), body)
        assert line.startswith(b"INSERTED "), line
        return int(line.split()[1])

    def yaml(self, line: bytes) -> dict[str, str]:
        head, data = self.do(line)
        if data is None:
            return {"reply": head.decode()}
        return dict(re.findall(r"^([\w-]+): (.*)$", data.decode(), re.M))


def _exited_or_listening(popen: subprocess.Popen[bytes], port: int) -> Callable[[], bool]:
    return lambda: popen.poll() is not None or accepts_connections("127.0.0.1", port)
