"""A tube's ready queue: jobs by (priority, id), as a heap of plain ints.

Each entry is the job's key ``pri << 64 | id`` (just the id when the priority is 0), so
the heap is kept by the C ``heapq`` functions and costs no per-job bookkeeping object.
A job that leaves the ready state some other way than by :meth:`ReadyQueue.pop` (delete,
reserve-job) leaves its entry behind; an entry counts only while its job is still ready
with that key, stale ones are skipped when they reach the top and swept out when they
outnumber the live ones. Unlike the index-tracked :class:`~cmdstalk_py.server.heap.Heap`
it keeps no position per job and pops in C: smaller and faster for a deep queue.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from cmdstalk_py.server.job import READY, Job

_ID_MASK = (1 << 64) - 1


def ready_key(job: Job) -> int:
    """Ready order: lowest priority first, then lowest id (docs §5.2)."""
    pri = job.pri
    # With priority 0 the key is the id object itself: no extra int per job.
    return job.id if pri == 0 else (pri << 64) | job.id


class ReadyQueue:
    """The ready jobs of one tube. ``jobs`` is the engine's id index."""

    __slots__ = ("heap", "jobs", "live", "stale")

    def __init__(self, jobs: dict[int, Job]) -> None:
        self.heap: list[int] = []
        self.jobs = jobs
        self.live = 0
        self.stale = 0

    def __len__(self) -> int:
        return self.live

    def __bool__(self) -> bool:
        return self.live > 0

    def _valid(self, key: int) -> Job | None:
        job = self.jobs.get(key & _ID_MASK)
        if job is not None and job.state is READY and ready_key(job) == key:
            return job
        return None

    def push(self, job: Job) -> None:
        """Add a job that just became ready."""
        pri = job.pri
        # ready_key, written out: this runs once per job made ready.
        heappush(self.heap, job.id if pri == 0 else (pri << 64) | job.id)
        self.live += 1

    def _clean_top(self) -> Job | None:
        heap = self.heap
        while heap:
            job = self._valid(heap[0])
            if job is not None:
                return job
            heappop(heap)
            self.stale -= 1
        return None

    def peek(self) -> Job | None:
        """The next job, left in place (None when empty)."""
        return self._clean_top() if self.live else None

    def top_key(self) -> int:
        """The key of the next job (the queue must not be empty)."""
        self._clean_top()
        return self.heap[0]

    def pop(self) -> Job:
        """Remove and return the next job (the queue must not be empty)."""
        heap = self.heap
        jobs = self.jobs
        while True:
            key = heappop(heap)
            job = jobs.get(key & _ID_MASK)
            # A live entry: the job is still ready with this key (ready_key, written out).
            if job is not None and job.state is READY:
                pri = job.pri
                if key == (job.id if pri == 0 else (pri << 64) | job.id):
                    self.live -= 1
                    return job
            self.stale -= 1

    def remove(self, job: Job) -> None:
        """``job`` leaves the ready state by other means; its entry goes stale.

        Call it before ``job``'s priority changes (its state may already have changed).
        """
        self.live -= 1
        self.stale += 1
        if self.stale > 64 and self.stale > self.live:
            self._sweep(job)

    def _sweep(self, leaving: Job) -> None:
        # Keep one entry per job that is still ready, except the one leaving now.
        keep = {k for k in self.heap if self._valid(k) is not None}
        keep.discard(ready_key(leaving))
        self.heap = list(keep)
        heapify(self.heap)
        self.stale = 0
