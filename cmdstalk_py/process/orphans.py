"""Adopted orphans: reaping them without stealing the exit status of a running command.

A supervisor that is a child subreaper (``set_child_subreaper``) or PID 1 adopts every
orphaned descendant of its commands. ``run_command`` reaps the ones it kills; others (a
daemon a job started with ``setsid`` that exits later) would stay zombies forever.
``reap_orphans`` reaps those. It must never reap a command ``run_command`` is still
waiting for, so every command's pid is registered from the moment it is spawned until it
is reaped.

The registry belongs to the event loop's thread: ``run_command`` spawns and reaps there,
and ``reap_orphans`` must be called there too (it is short: a ``waitid`` that usually
finds nothing). One owner, so no lock: a reaper on another thread could otherwise reap a
command between its spawn and its registration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import psutil

from cmdstalk_py.process.spawn import Spawned, spawn

_commands: set[int] = set()


def spawn_tracked(argv: Sequence[str], env: Mapping[str, str], control: bool = False) -> Spawned:
    """``spawn``, with the pid registered before any reaper can see it."""
    child = spawn(argv, env, control)
    _commands.add(child.pid)
    return child


def untrack(pid: int) -> None:
    """The command ``pid`` has been reaped by its ``run_command`` (or left to us)."""
    _commands.discard(pid)


def reap_orphans() -> int:
    """Reap zombie children that no ``run_command`` is waiting for; return how many.

    Meant to be called about once a second, on the loop's thread. Only useful in a
    subreaper or PID 1. Do not use it in a process that also waits for children started
    some other way (``subprocess``): it would reap those too.
    """
    # First a look without reaping: usually no child has exited, and then not even our
    # children need listing.
    try:
        waitable = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return 0  # no children at all
    if waitable is None:
        return 0
    reaped = 0
    for child in _children():
        if child in _commands:
            continue  # its run_command will reap it and read its status
        try:
            pid, _ = os.waitpid(child, os.WNOHANG)  # a live child: 0, nothing reaped
        except ChildProcessError:
            continue
        reaped += pid != 0
    return reaped


def _children() -> list[int]:
    """Our children's pids, from our own threads' lists in /proc: no look at any other
    process (whose /proc entries can be slow to read), so fit for the loop. A kernel
    without those lists gets psutil's scan of every process instead."""
    if not os.path.exists("/proc/thread-self/children"):
        try:
            return [p.pid for p in psutil.Process().children()]
        except psutil.Error:
            return []
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids += map(int, f.read().split())
        except OSError:
            continue  # that thread has just ended
    return pids
