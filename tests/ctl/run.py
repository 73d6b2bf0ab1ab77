"""Running the installed ``cmdstalk-ctl`` command, as an operator would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CTL = str(Path(sys.executable).with_name("cmdstalk-ctl"))


def ctl(
    address: str | None, *args: str, stdin: bytes = b"", timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    """``cmdstalk-ctl [-a address] args…`` with ``stdin``; output captured as bytes."""
    argv = [CTL, *(["--address", address] if address else []), *args]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)


def out(result: subprocess.CompletedProcess[bytes]) -> str:
    """stdout as text, after checking that no raw escape or control reached it."""
    for byte in result.stdout:
        assert byte in b"\n" or (byte >= 0x20 and byte != 0x7F), (byte, result.stdout)
    return result.stdout.decode("utf-8")
