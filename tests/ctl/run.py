"""Running the installed ``cmdstalk-ctl`` command, as an operator would: with pipes, or on
a pseudo-terminal."""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

CTL = str(Path(sys.executable).with_name("cmdstalk-ctl"))


def ctl(
    address: str | None,
    *args: str,
    stdin: bytes = b"",
    timeout: float = 60,
    columns: int | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``cmdstalk-ctl [-a address] args…`` with ``stdin``; output captured as bytes;
    ``columns``: the terminal width it is told (80 otherwise: stdout is a pipe)."""
    argv = [CTL, *(["--address", address] if address else []), *args]
    env = {**os.environ, "COLUMNS": str(columns)} if columns else None
    return subprocess.run(
        argv, input=stdin, capture_output=True, timeout=timeout, check=False, env=env
    )


def out(result: subprocess.CompletedProcess[bytes]) -> str:
    """stdout as text, after checking that no raw escape or control reached it."""
    for byte in result.stdout:
        assert byte in b"\n" or (byte >= 0x20 and byte != 0x7F), (byte, result.stdout)
    return result.stdout.decode("utf-8")


@dataclass(frozen=True)
class OnTerminal:
    """A run of ``cmdstalk-ctl`` with a terminal as its stdout and stderr."""

    status: int
    screen: bytes  # all it wrote, as the terminal received it
    ended: float  # time.monotonic() when its output closed and it exited


#: The address space a run on a terminal may have: an unbounded read hits it (and fails,
#: with a MemoryError and exit 1, not the one line and exit 3 the tests expect) before it
#: can take the test machine's memory; the hostile replies announce or send 1 GiB. (The
#: child's own peak cannot be read from rusage: after a vfork spawn its ``ru_maxrss``
#: starts at the parent's high-water mark, a test runner's hundreds of MiB.)
ADDRESS_SPACE = 512 << 20
_LIMITED = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1]))); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def ctl_on_terminal(*args: str, deadline: float = 20.0) -> OnTerminal:
    """``cmdstalk-ctl args…`` on a pseudo-terminal (as an operator runs it), its memory
    bounded by ``ADDRESS_SPACE``; killed, and the test failed, if still running after
    ``deadline`` seconds."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    argv = [sys.executable, "-c", _LIMITED, str(ADDRESS_SPACE), CTL, *args]
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    screen = bytearray()
    give_up = time.monotonic() + deadline
    try:
        while chunk := _read(master, give_up):
            screen += chunk
        while (reaped := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > give_up:
                raise AssertionError(f"cmdstalk-ctl {args} still running after {deadline}s")
            time.sleep(0.05)  # polling for the exit the closed terminal announced
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended = time.monotonic()
    proc.returncode = os.waitstatus_to_exitcode(reaped[1])
    return OnTerminal(proc.returncode, bytes(screen), ended)


def _read(master: int, give_up: float) -> bytes:
    """The next output on the terminal; b"" once the command closed it."""
    left = give_up - time.monotonic()
    if left <= 0 or not select.select([master], [], [], left)[0]:
        raise AssertionError("cmdstalk-ctl still running: its --timeout did not hold")
    try:
        return os.read(master, 65536)
    except OSError as e:
        if e.errno == errno.EIO:  # Linux: every holder of the terminal's other end closed it
            return b""
        raise
