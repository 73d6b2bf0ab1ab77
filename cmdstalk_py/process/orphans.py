"""Adopted orphans: reaping them without stealing the exit status of a running command.

A supervisor that is a child subreaper (``set_child_subreaper``) or PID 1 adopts every
orphaned descendant of its commands. ``run_command`` reaps the ones it kills; others (a
daemon a job started with ``setsid`` that exits later) would stay zombies forever.
``reap_orphans`` reaps those. It must never reap a command ``run_command`` is still
waiting for, so every command's pid is registered, under a lock, from the moment it is
spawned until it is reaped.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence

import psutil

from cmdstalk_py.process.spawn import Spawned, spawn

_lock = threading.Lock()
_commands: set[int] = set()


def spawn_tracked(argv: Sequence[str], env: Mapping[str, str], control: bool = False) -> Spawned:
    """``spawn``, with the pid registered before any reaper can see it."""
    with _lock:
        child = spawn(argv, env, control)
        _commands.add(child.pid)
    return child


def untrack(pid: int) -> None:
    """The command ``pid`` has been reaped by its ``run_command``."""
    with _lock:
        _commands.discard(pid)


def reap_orphans() -> int:
    """Reap zombie children that no ``run_command`` is waiting for; return how many.

    Meant to be called about once a second. Only useful in a subreaper or PID 1. Do not
    use it in a process that also waits for children started some other way
    (``subprocess``): it would reap those too.
    """
    # First a look without reaping: usually no child has exited, and then the scan of
    # every process in /proc below (which also holds the GIL against busy brokers for
    # a few milliseconds) is not needed.
    try:
        waitable = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return 0  # no children at all
    if waitable is None:
        return 0
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return 0
    reaped = 0
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        with _lock:
            if child.pid in _commands:
                continue  # its run_command will reap it and read its status
            try:
                pid, _ = os.waitpid(child.pid, os.WNOHANG)
            except ChildProcessError:
                continue
            reaped += pid != 0
    return reaped
