"""Running one job's command: spawn in its own session, feed stdin, read output, kill trees.

Public interface: ``run_command`` (a coroutine: it runs the command on the running
``cmdstalk_py.loop`` loop and never blocks it) returns a ``ProcessResult``; ``KillReason``
says why we killed a command; ``Switch`` is the loop-owned flag (``stop`` / ``stop_now``)
that stops commands at once; ``LineBudget`` caps the output lines a command's callbacks get
a second;
``set_child_subreaper`` lets the supervisor adopt (and so reap) the orphaned descendants
of its commands, and ``reap_orphans`` (call it about once a second, on the loop's thread)
reaps the adopted ones that exit after their command is done. ``batch_thread`` /
``restore_thread`` put a thread under ``SCHED_BATCH`` and back (``sched.py``).
``start_sentinel`` starts the process that kills the running commands if the supervisor
itself is killed (``sentinel.py``).

Modules: ``run.py`` (one command's run on the event loop), ``spawn.py`` (posix_spawn in a
new session), ``kill.py`` (TERM -> grace -> KILL to a command's group, tree and marked
processes; its thread pool, for /proc work, is the one place this package uses threads),
``switch.py`` (``Switch``), ``marker.py`` (the ``CMDSTALK_RUN`` marker that finds
processes which left the group and the tree), ``sentinel.py`` (the guard against a killed
supervisor), ``orphans.py`` (reaping adopted orphans), ``output.py`` (line splitting,
tails and the line budget), ``result.py`` (``ProcessResult``, ``KillReason``),
``sched.py`` (``SCHED_BATCH``), ``stdin.py`` (writing the payload), ``lease.py``
(``Lease``: a deadline its owner moves while the command runs, and timed work on the
loop), ``control.py`` (the command's control channel on fd 3: bounded reading and the
request grammar), ``usage.py`` (what a command's tree used: /proc samples, ``Limits``),
``cgroup.py`` (which cgroups the supervisor may manage, chosen at start-up by
``configure``; a cgroup per limited run), ``jobcgroup.py`` (one run's cgroup),
``escalation.py`` (when which kill signal goes out).
"""

from cmdstalk_py.process.kill import set_child_subreaper
from cmdstalk_py.process.orphans import reap_orphans
from cmdstalk_py.process.output import LineBudget
from cmdstalk_py.process.result import KillReason, ProcessResult
from cmdstalk_py.process.run import run_command
from cmdstalk_py.process.sched import batch_thread, restore_thread
from cmdstalk_py.process.sentinel import start_sentinel
from cmdstalk_py.process.switch import Switch

__all__ = [
    "KillReason",
    "LineBudget",
    "ProcessResult",
    "Switch",
    "batch_thread",
    "reap_orphans",
    "restore_thread",
    "run_command",
    "set_child_subreaper",
    "start_sentinel",
]
