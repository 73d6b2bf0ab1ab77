"""Processes for the ops drills: a notify socket collector and clean process teardown."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.helpers import wait_until


class NotifyListener:
    """A real ``NOTIFY_SOCKET``: a bound AF_UNIX datagram socket collecting every message."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.messages: list[str] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(path)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.extend(data.decode().splitlines())

    def wait_for(
        self, line: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30
    ) -> None:
        """Wait for ``line``; give up early if ``proc`` (the sender) exits without sending it."""
        wait_until(
            lambda: line in self.messages or (proc is not None and proc.poll() is not None),
            timeout=timeout, message=f"{line} on notify",
        )  # fmt: skip
        assert line in self.messages, f"{line} never sent; got {self.messages}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@contextmanager
def notify_listener() -> Iterator[NotifyListener]:
    # sun_path holds 108 bytes: pytest's tmp_path can be longer than that.
    with tempfile.TemporaryDirectory(prefix="nfy") as d:
        listener = NotifyListener(os.path.join(d, "notify"))
        try:
            yield listener
        finally:
            listener.close()


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """TERM, wait, then KILL: used in ``finally`` so no test leaves a process behind."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
