"""A lone broker thread under ``SCHED_BATCH``: it gives way to the commands it starts.

A broker and the command it just started usually share a CPU (the child starts where its
parent runs). Under ``SCHED_OTHER`` every wakeup of the broker preempts whatever runs
there: the end of the spawn preempts the command's own start-up for the broker's
bookkeeping (payload, the last job's log line), and each reply from the server preempts
the server before it is done. A ``SCHED_BATCH`` thread is never woken *into* the CPU: it
runs when the running task blocks or its slice ends (a few milliseconds at most), so the
bookkeeping happens while the command waits (for its own children, for I/O) instead of
in its way.

Opt-in (``--batch-scheduling``), and only for a single broker (``Config.single_broker``;
the broker decides): with several, a woken broker usually finds *another* broker's command
on its CPU and waits behind it, and their pipelines stall. The gain and the loss were
measured on one 2-vCPU VM only (``benchmarks/README.md``), so it is not the default.

The CPU share does not change (nice stays as it is) and nothing an administrator chose is
overridden: only a thread running ``SCHED_OTHER`` is switched, and the commands it spawns
get that policy back instead of inheriting the thread's (``spawn_options``). Linux only; a
refusal (or another platform) leaves the thread as it was.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

_local = threading.local()
_NONE: dict[str, Any] = {}


def batch_thread() -> bool:
    """Switch the calling thread from ``SCHED_OTHER`` to ``SCHED_BATCH``; True if it was.

    Undo with ``restore_thread``. Commands spawned by this thread meanwhile run under
    ``SCHED_OTHER`` (see ``spawn_options``).
    """
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is None or getattr(_local, "options", None) is not None:
        return False
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return False  # idle, batch or real-time: somebody chose it, keep it
        os.sched_setscheduler(0, batch, os.sched_param(0))
    except OSError:
        return False
    _local.options = {"scheduler": (os.SCHED_OTHER, os.sched_param(0))}
    return True


def restore_thread() -> None:
    """Put a thread that ``batch_thread`` switched back under ``SCHED_OTHER``."""
    if getattr(_local, "options", None) is None:
        return
    _local.options = None
    # Leaving SCHED_BATCH needs no privilege; if it fails all the same, nothing better to do.
    with contextlib.suppress(OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def spawn_options() -> dict[str, Any]:
    """Extra ``os.posix_spawn`` keywords for a command spawned by the calling thread."""
    options: dict[str, Any] | None = getattr(_local, "options", None)
    return _NONE if options is None else options
