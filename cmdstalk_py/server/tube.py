"""Tubes: per-tube queues (ready heap, delay heap, buried FIFO), waiters and counters, and
the set of live tubes with the connections' references to them (use, watch, ignore)."""

from __future__ import annotations

from cmdstalk_py.server.heap import Heap
from cmdstalk_py.server.job import Job
from cmdstalk_py.server.ready import ReadyQueue

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

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
        self.delayed = Heap()
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


def best_ready(tubes: Iterable[Tube]) -> Tube | None:
    """The unpaused tube among ``tubes`` whose next ready job comes first, if any."""
    best: Tube | None = None
    best_key = None
    for t in tubes:
        if t.ready.live and not t.paused:  # the count itself: no __bool__ call per tube
            if best is None:
                # Keys are only compared once there is a second candidate.
                best = t
                continue
            if best_key is None:
                best_key = best.ready.top_key()
            key = t.ready.top_key()
            if key < best_key:
                best, best_key = t, key
    return best


class TubeSet:
    """The live tubes, by name and in ``list-tubes`` order (docs §2).

    A tube is created when first named and dropped as soon as nothing references it: no
    connection uses or watches it and no job is in it (``default`` stays for ever).
    """

    __slots__ = ("by_name", "jobs", "order")

    def __init__(self, jobs: dict[int, Job]) -> None:
        self.by_name: dict[bytes, Tube] = {}
        self.order: list[Tube] = []
        #: The engine's id index, shared by every tube's ready queue.
        self.jobs = jobs

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self) -> Iterator[Tube]:
        return iter(self.order)

    def get(self, name: bytes) -> Tube | None:
        """The live tube called ``name``, if there is one."""
        return self.by_name.get(name)

    def tube(self, name: bytes) -> Tube:
        """The tube called ``name``, created if needed."""
        t = self.by_name.get(name)
        if t is None:
            t = Tube(name, len(self.order), self.jobs)
            self.by_name[name] = t
            self.order.append(t)
        return t

    def drop_if_unused(self, t: Tube) -> None:
        """Forget ``t`` if nothing references it any more."""
        if t.referenced() or self.by_name.get(t.name) is not t:
            return
        del self.by_name[t.name]
        # 1.12 removes from its tube array by moving the last one into the hole.
        last = self.order.pop()
        if last is not t:
            self.order[t.index] = last
            last.index = t.index
        t.paused = False

    def use(self, s: Session, name: bytes) -> Tube:
        """``s`` puts into (and peeks and kicks in) ``name`` from now on."""
        t = self.tube(name)
        old = s.use
        if t is not old:
            t.using += 1
            s.use = t
            old.using -= 1
            self.drop_if_unused(old)
        return t

    def watch(self, s: Session, name: bytes) -> int:
        """``s`` reserves from ``name`` too; how many tubes it watches."""
        t = self.tube(name)
        index = s.watch_index
        if t not in index:
            index[t] = len(s.watch)
            s.watch.append(t)
            t.watching += 1
        return len(s.watch)

    def ignore(self, s: Session, name: bytes) -> int | None:
        """``s`` stops watching ``name``; how many it still watches (None: it is the last
        one, which stays)."""
        t = self.by_name.get(name)
        watch = s.watch
        index = s.watch_index
        if t is None or t not in index:
            return len(watch)
        if len(watch) == 1:
            return None
        # 1.12 removes from the watch array by moving the last one into the hole.
        i = index.pop(t)
        last = watch.pop()
        if i < len(watch):
            watch[i] = last
            index[last] = i
        t.watching -= 1
        self.drop_if_unused(t)
        return len(watch)

    def leave(self, s: Session) -> None:
        """``s`` closed: it no longer uses or watches anything."""
        use = s.use
        use.using -= 1
        self.drop_if_unused(use)
        for t in s.watch:
            t.watching -= 1
            self.drop_if_unused(t)
