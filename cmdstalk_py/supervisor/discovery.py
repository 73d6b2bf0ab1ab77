"""Tube discovery for ``--all`` and globs: one ``list-tubes`` poll per server and interval.

``Discovery`` runs as a task on the supervisor's event loop with its own self-healing
connection to one server and tells its owner (a pool's ``Site``) which matching tubes
exist (``found``) and which are gone (``gone``). beanstalkd drops a tube once it is empty
and nobody watches or uses it, but our own workers watching a tube keep it alive: so a
tube counts as gone when it has no jobs, nobody uses it, nobody but us watches it, and
that stays so for ``retire_after`` seconds (or when the server no longer lists it at all).

A round costs one ``list-tubes`` however many tubes there are. The let-go rule asks
``stats-tube`` only of tubes that are due (``CheckPlan``): a tube found in use is looked
at again after a delay that doubles each time, up to ``MAX_CHECK_INTERVALS`` intervals; one
that looks abandoned, every interval until it has stayed so for ``retire_after``; and never
more than ``MAX_CHECKS_PER_ROUND`` tubes a round (the others wait their turn). So an idle
supervisor with a thousand tubes sends a few requests a second, not a thousand. The pure
rules (which names a pool selects, whether a tube looks abandoned, when a tube is next
due) are tested alone.
"""

from __future__ import annotations

import fnmatch
import heapq
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from cmdstalk_py.client.aio import AsyncClient
from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import CONNECTION_ERRORS, NotFound
from cmdstalk_py.client.replies import parse_list
from cmdstalk_py.loop.core import get_running_loop
from cmdstalk_py.loop.futures import Future, Task
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.config import is_glob
from cmdstalk_py.supervisor.looptime import Alarm

log = logging.getLogger("cmdstalk.dispatcher")

#: Discovery intervals an abandoned tube must stay so before its workers are retired.
RETIRE_INTERVALS = 30
#: A tube in use is looked at (``stats-tube``) first this many intervals after it appeared
#: or was last seen in use; the delay doubles at each look, up to ``MAX_CHECK_INTERVALS``.
FIRST_CHECK_INTERVALS = 10
MAX_CHECK_INTERVALS = 300
#: The most ``stats-tube`` requests in one round; tubes past it wait for the next rounds.
MAX_CHECKS_PER_ROUND = 5


def selector(tubes: Sequence[str], all_tubes: bool) -> Callable[[str], bool]:
    """Which tube names a pool serves: every one (``--all``), or the listed names and globs."""
    if all_tubes:
        return lambda name: True
    names = {t for t in tubes if not is_glob(t)}
    globs = [t for t in tubes if is_glob(t)]
    return lambda name: name in names or any(fnmatch.fnmatchcase(name, g) for g in globs)


def abandoned(stats: Mapping[str, object], ours: int) -> bool:
    """A tube with no job, no user and no watcher but our ``ours`` connections."""
    jobs = sum(
        int(str(stats[f"current-jobs-{state}"]))
        for state in ("ready", "reserved", "delayed", "buried")
    )
    watching = int(str(stats["current-watching"]))
    return jobs == 0 and int(str(stats["current-using"])) == 0 and watching <= ours


class CheckPlan:
    """When each tube is next asked ``stats-tube`` (pure: the clock is passed in).

    ``due`` maps each tube to its time; a heap of ``(time, tube)`` finds the earliest
    without a scan of every tube each round (a thousand tubes, one round a second). An
    entry whose time is no longer the tube's is stale and dropped when it comes up.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.due: dict[str, float] = {}
        self.delay: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def _at(self, tube: str, at: float) -> None:
        self.due[tube] = at
        heapq.heappush(self._heap, (at, tube))
        if len(self._heap) > 2 * len(self.due) + 64:  # mostly stale: start afresh
            self._heap = [(t, name) for name, t in self.due.items()]
            heapq.heapify(self._heap)

    def add(self, tube: str, now: float) -> None:
        self.delay[tube] = FIRST_CHECK_INTERVALS * self.interval
        self._at(tube, now + self.delay[tube])

    def forget(self, tube: str) -> None:
        self.due.pop(tube, None)
        self.delay.pop(tube, None)

    def take_due(self, now: float, limit: int = MAX_CHECKS_PER_ROUND) -> list[str]:
        """Up to ``limit`` tubes whose look is due, most overdue first. They stay due
        until ``in_use`` or ``looks_abandoned`` says when next (a look that failed is
        tried again)."""
        heap = self._heap
        taken: list[str] = []
        while heap and len(taken) < limit:
            at, tube = heap[0]
            if self.due.get(tube) != at or tube in taken:
                heapq.heappop(heap)  # stale, or a second entry of one already taken
            elif at > now:
                break
            else:
                heapq.heappop(heap)
                taken.append(tube)
        for tube in taken:
            heapq.heappush(heap, (self.due[tube], tube))
        return taken

    def in_use(self, tube: str, now: float) -> None:
        """Seen in use: look again later, each time later (up to the cap)."""
        delay = min(self.delay.get(tube, self.interval) * 2, MAX_CHECK_INTERVALS * self.interval)
        self.delay[tube] = delay
        self._at(tube, now + delay)

    def looks_abandoned(self, tube: str, now: float) -> None:
        """Seen abandoned: look every interval until it is let go (or in use again)."""
        self.delay[tube] = FIRST_CHECK_INTERVALS * self.interval
        self._at(tube, now + self.interval)


class Discovery:
    """Polls one server's tubes for a pool; ``found(names)`` / ``gone(name)`` tell the owner.

    ``watchers(tube)``: how many of our connections to this server watch ``tube``.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        where: str,
        select: Callable[[str], bool],
        found: Callable[[Iterable[str]], None],
        gone: Callable[[str], None],
        watchers: Callable[[str], int],
        interval: float,
        io_timeout: float,
        max_wait: float,
        observer: Observer,
        outage: OutageReporter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = HealingConnection(
            host, port, where=where, io_timeout=io_timeout, max_wait=max_wait,
            observer=observer, outage=outage,
        )  # fmt: skip
        self.where = where
        self._select = select
        self._found = found
        self._gone = gone
        self._watchers = watchers
        self._interval = interval
        self._clock = clock
        self.retire_after = RETIRE_INTERVALS * interval
        self._known: set[str] = set()
        self._checks = CheckPlan(interval)
        self._empty_since: dict[str, float] = {}
        self._listing = (b"", [""])  # the last list-tubes reply, and the names it selected
        # Tubes let go of that the server still lists (our connections may not have closed
        # yet): looked at each round until the server drops them, or they are in use again.
        self._let_go: set[str] = set()
        self.listed = False  # the first tube list is known
        self._stopped = False
        self._alarm = Alarm()
        self.task: Task[int] | None = None

    def start(self) -> None:
        self.task = get_running_loop().create_task(self._loop(), name=self.where)
        self.task.add_done_callback(report_crash)

    async def _loop(self) -> int:
        conn = self.connection
        try:
            while not self._stopped:
                try:
                    await self.poll(self._clock())
                except Stopped:
                    return 0
                except CONNECTION_ERRORS as e:
                    conn.drop(e)
                    continue
                self.listed = True
                await self._alarm.sleep(self._interval)  # stop() cuts it short
        except Exception:  # never take the process down; workers already started go on
            log.exception("tube discovery failed; no new tubes will be served")
        finally:
            conn.close()
        return 0

    async def poll(self, now: float) -> None:
        """One round: list the tubes, report new ones, look at those due, retire abandoned."""
        client = await self.connection.client()
        body = await client.tubes_listed()
        # An idle server's list is the same bytes every round: parsed only when it changed
        # (or while tubes let go of are still listed: one may come back between rounds).
        if body != self._listing[0] or self._let_go:
            self._listing = (body, [n for n in parse_list(body) if self._select(n)])
            self._changed(self._listing[1], now)
        if self._let_go:
            await self._look_again(client, now)
        due = self._checks.take_due(now)
        if due:
            await self._look_at(client, due, now)

    def _changed(self, names: list[str], now: float) -> None:
        """The server's list changed: report new tubes, retire those no longer listed."""
        listed = set(names)
        self._let_go &= listed
        new = [n for n in names if n not in self._known and n not in self._let_go]
        if new:
            self._serve(new, now)
        for tube in sorted(self._known - listed):
            self._retire(tube)  # dropped by the server: nobody watches it any more

    def _serve(self, tubes: list[str], now: float) -> None:
        self._known.update(tubes)
        for tube in tubes:
            if tube != "default":  # every connection starts on it: it never goes away
                self._checks.add(tube, now)
        self._found(tubes)

    async def _look_again(self, client: AsyncClient, now: float) -> None:
        """A tube let go of but still listed is served again once it is in use again."""
        tubes = sorted(self._let_go)
        replies = [(tube, client.stats_tube(tube)) for tube in tubes]
        back = []
        for tube, reply in replies:
            try:
                stats = await reply
            except NotFound:
                self._let_go.discard(tube)
                continue
            if not abandoned(stats, self._watchers(tube)):
                self._let_go.discard(tube)
                back.append(tube)
        if back:
            self._serve(back, now)

    async def _look_at(self, client: AsyncClient, due: list[str], now: float) -> None:
        """``stats-tube`` of the tubes due a look; retire those abandoned long enough."""
        # Sent together, read in order: one round trip for the lot.
        replies = [(tube, client.stats_tube(tube)) for tube in due]
        for tube, reply in replies:
            try:
                stats = await reply
            except NotFound:
                self._retire(tube)
                continue
            if not abandoned(stats, self._watchers(tube)):
                self._empty_since.pop(tube, None)
                self._checks.in_use(tube, now)
            elif now - self._empty_since.setdefault(tube, now) >= self.retire_after:
                self._retire(tube)
            else:
                self._checks.looks_abandoned(tube, now)

    def _retire(self, tube: str) -> None:
        self._known.discard(tube)
        self._let_go.add(tube)
        self._empty_since.pop(tube, None)
        self._checks.forget(tube)
        self._gone(tube)

    def stop(self) -> None:
        """End the polling (and a reconnect under way)."""
        self._stopped = True
        self._alarm.poke()
        self.connection.stop()


def report_crash(task: Future[int]) -> None:
    """Log a worker or discovery task that ended by an exception (a bug: each catches what
    it expects); nothing else would ever look at its result."""
    if not task.cancelled() and task.exception() is not None:
        name = task.get_name() if isinstance(task, Task) else repr(task)
        log.error("%s: ended by an unexpected error", name, exc_info=task.exception())
