"""Tube discovery for ``--all`` and globs: one ``list-tubes`` poll per server and interval.

``Discovery`` runs on its own thread with its own self-healing connection to one server
and tells its owner (a pool's ``Site``) which matching tubes exist (``found``) and which
are gone (``gone``). beanstalkd drops a tube once it is empty and nobody watches or uses
it, but our own workers watching a tube keep it alive: so a tube counts as gone when it
has no jobs, nobody uses it, nobody but us watches it, and that stays so for
``retire_after`` seconds (or when the server no longer lists it at all). The pure rules
(which names a pool selects, whether a tube looks abandoned) are functions tested alone.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import CONNECTION_ERRORS, NotFound
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.config import is_glob

log = logging.getLogger("cmdstalk.dispatcher")

#: Discovery intervals an abandoned tube must stay so before its workers are retired.
RETIRE_INTERVALS = 30
#: Tubes are looked at (``stats-tube`` each) every this many rounds, not every round:
#: list-tubes alone is one request a round, however many tubes there are.
CHECK_EVERY = 10


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
        stop: threading.Event,
        io_timeout: float,
        max_wait: float,
        observer: Observer,
        outage: OutageReporter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = HealingConnection(
            host, port, where=where, stop=stop, io_timeout=io_timeout, max_wait=max_wait,
            observer=observer, outage=outage,
        )  # fmt: skip
        self._select = select
        self._found = found
        self._gone = gone
        self._watchers = watchers
        self._interval = interval
        self._stop = stop
        self._clock = clock
        self.retire_after = RETIRE_INTERVALS * interval
        self._known: set[str] = set()
        self._round = 0
        self._empty_since: dict[str, float] = {}
        self.listed = threading.Event()  # the first tube list is known
        self.thread = threading.Thread(target=self._loop, name=f"cmdstalk-{where}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        conn = self.connection
        try:
            while not self._stop.is_set():
                try:
                    self.poll(self._clock())
                except Stopped:
                    return
                except CONNECTION_ERRORS as e:
                    conn.drop(e)
                    continue
                self.listed.set()
                self._stop.wait(self._interval)
        except Exception:  # never take the process down; workers already started go on
            log.exception("tube discovery failed; no new tubes will be served")
        finally:
            conn.close()

    def poll(self, now: float) -> None:
        """One round: list the tubes, report new ones, retire abandoned ones."""
        client = self.connection.client()
        names = [n for n in client.tubes() if self._select(n)]
        new = [n for n in names if n not in self._known]
        if new:
            self._known.update(new)
            self._found(new)
        for tube in sorted(self._known - set(names)):
            self._retire(tube)  # dropped by the server: nobody watches it any more
        self._round += 1
        if self._round % CHECK_EVERY:
            return
        for tube in names:
            if tube == "default":
                continue  # every connection starts on it: it never goes away
            try:
                stats = client.stats_tube(tube)
            except NotFound:
                self._retire(tube)
                continue
            if not abandoned(stats, self._watchers(tube)):
                self._empty_since.pop(tube, None)
            elif now - self._empty_since.setdefault(tube, now) >= self.retire_after:
                self._retire(tube)

    def _retire(self, tube: str) -> None:
        self._known.discard(tube)
        self._empty_since.pop(tube, None)
        self._gone(tube)

    def abort(self) -> None:
        self.connection.abort()
