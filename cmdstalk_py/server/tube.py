"""Tubes: per-tube queues (ready heap, delay heap, buried FIFO), waiters and counters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cmdstalk_py.server.heap import Heap
from cmdstalk_py.server.job import Job
from cmdstalk_py.server.ready import ReadyQueue

if TYPE_CHECKING:
    from cmdstalk_py.server.session import Session


class Tube:
    """A named queue. It lives while something references it (docs §2)."""

    __slots__ = (
        "buried",
        "cmd_delete",
        "cmd_pause",
        "delayed",
        "index",
        "jobs",
        "name",
        "pause",
        "paused",
        "permanent",
        "ready",
        "reserved",
        "total_jobs",
        "unpause_at",
        "urgent",
        "using",
        "waiting",
        "watching",
    )

    def __init__(self, name: bytes, index: int, jobs: dict[int, Job]) -> None:
        self.name = name
        self.ready = ReadyQueue(jobs)
        # Keyed by (deadline, id): earliest first, ties by id.
        self.delayed: Heap[Job] = Heap()
        # Insertion-ordered: the oldest buried job first; O(1) removal from anywhere.
        self.buried: dict[Job, None] = {}
        # Connections blocked in a reserve that watch this tube, first come first served.
        self.waiting: dict[Session, None] = {}
        self.urgent = 0
        self.reserved = 0
        self.total_jobs = 0
        self.using = 0
        self.watching = 0
        self.jobs = 0
        self.cmd_delete = 0
        self.cmd_pause = 0
        self.paused = False
        self.pause = 0
        self.unpause_at = 0.0
        # Position in the engine's tube list (list-tubes order, swap-remove like 1.12).
        self.index = index
        self.permanent = False

    def referenced(self) -> bool:
        """True while a connection uses or watches it, or a job is in it."""
        return self.permanent or self.using > 0 or self.watching > 0 or self.jobs > 0

    def __repr__(self) -> str:
        return f"<Tube {self.name.decode()}>"
