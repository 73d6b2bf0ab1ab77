"""What a job's command tree cost, in words: ``120 MiB peak, 1.52 s CPU, 3 processes``.

One wording for the supervisor's result line (``joblog``) and for ``cmdstalk-ctl``
(``show --events``, ``tail``), which reads the same figures back from the event log. No
imports: ctl takes it without the supervisor's process machinery (asyncio, psutil).
"""

from __future__ import annotations

MIB = 1 << 20


def cost_parts(
    peak_memory_bytes: float | None, cpu_s: float | None, procs: int | None
) -> list[str]:
    """The figures that are known, each in words; a None figure says nothing."""
    parts = []
    if peak_memory_bytes is not None:
        parts.append(f"{peak_memory_bytes / MIB:.0f} MiB peak")
    if cpu_s is not None:
        parts.append(f"{cpu_s:.2f} s CPU")
    if procs is not None:
        parts.append(f"{procs} process" + ("" if procs == 1 else "es"))
    return parts
