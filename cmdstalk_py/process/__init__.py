"""Running one job's command: spawn in its own session, feed stdin, read output, kill trees.

Public interface: ``run_command`` returns a ``ProcessResult``; ``KillReason`` says why we
killed a command; ``set_child_subreaper`` lets the supervisor adopt (and so reap) the
orphaned descendants of its commands, and ``reap_orphans`` (call it about once a second)
reaps the adopted ones that exit after their command is done. ``batch_thread`` /
``restore_thread`` put a broker thread under ``SCHED_BATCH`` and back (``sched.py``).
"""

from cmdstalk_py.process.kill import set_child_subreaper
from cmdstalk_py.process.orphans import reap_orphans
from cmdstalk_py.process.result import KillReason, ProcessResult
from cmdstalk_py.process.run import run_command
from cmdstalk_py.process.sched import batch_thread, restore_thread

__all__ = [
    "KillReason",
    "ProcessResult",
    "batch_thread",
    "reap_orphans",
    "restore_thread",
    "run_command",
    "set_child_subreaper",
]
