"""The dispatcher: decides which brokers exist and runs each on its own thread.

With ``--tubes`` it starts ``per_tube`` brokers for every listed tube at once. With
``--all`` a discovery thread polls ``list-tubes`` every ``discover_interval`` seconds (on
its own self-healing connection) and starts ``per_tube`` brokers for each tube it has not
seen yet, so tubes created after start are served too. Brokers are never stopped one by
one: a tube that disappears (beanstalkd drops empty, unwatched tubes) keeps its brokers,
which keep watching it, so it stays alive and is served when jobs arrive again.
"""

from __future__ import annotations

import logging
import threading

from cmdstalk_py.client.connection import HealingConnection, OutageReporter, Stopped
from cmdstalk_py.client.errors import CONNECTION_ERRORS
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.config import Config

log = logging.getLogger("cmdstalk.dispatcher")


class Dispatcher:
    """Starts and tracks brokers; ``stop`` ends reserving everywhere (and discovery)."""

    def __init__(
        self,
        config: Config,
        observer: Observer,
        *,
        stop: threading.Event,
        kill: threading.Event,
        kill_now: threading.Event,
        budget: JobBudget,
    ) -> None:
        self.config = config
        self._observer = observer
        self._stop = stop
        self._kill = kill
        self._kill_now = kill_now
        self._budget = budget
        self._lock = threading.Lock()
        self._brokers: list[tuple[Broker, threading.Thread]] = []
        self._tubes: list[str] = []
        self._initial: list[Broker] = []
        self._discovered = threading.Event()  # the first tube list is known
        self._discovery: threading.Thread | None = None
        # Every connection to the server reports through it: one warning per outage.
        self._outage = OutageReporter(config.address)
        self._discovery_conn = HealingConnection(
            config.host,
            config.port,
            where="dispatcher",
            stop=stop,
            io_timeout=config.io_timeout,
            max_wait=config.reconnect_max_wait,
            observer=observer,
            outage=self._outage,
        )

    def start(self) -> None:
        """Start the brokers for ``--tubes``, or the discovery thread for ``--all``."""
        if self.config.all_tubes:
            self._discovery = threading.Thread(
                target=self._discover_loop, name="cmdstalk-discovery", daemon=True
            )
            self._discovery.start()
        else:
            for tube in self.config.tubes:
                self._initial.extend(self._start_tube(tube))
            self._discovered.set()

    def tubes(self) -> list[str]:
        """The tubes served so far (for metrics)."""
        with self._lock:
            return list(self._tubes)

    def brokers(self) -> list[Broker]:
        with self._lock:
            return [b for b, _ in self._brokers]

    def ready(self) -> bool:
        """True once the initial tube set is known and all its brokers are connected."""
        if not self._discovered.is_set():
            return False
        with self._lock:
            initial = list(self._initial)
        return all(b.connection.connected.is_set() for b in initial)

    def interrupt_idle(self) -> None:
        """Cut short the reserves of idle brokers and discovery (after ``stop`` was set)."""
        self._discovery_conn.abort()  # holds no job; may wait on a server that is silent
        for broker in self.brokers():
            broker.interrupt()

    def running(self) -> int:
        """How many broker threads (plus discovery) are still alive."""
        with self._lock:
            threads = [t for _, t in self._brokers]
        alive = sum(t.is_alive() for t in threads)
        if self._discovery is not None and self._discovery.is_alive():
            alive += 1
        return alive

    def join(self, timeout: float | None = None) -> None:
        """Wait for discovery and every broker to finish (after ``stop`` was set)."""
        if self._discovery is not None:
            self._discovery.join(timeout)
        with self._lock:
            threads = [t for _, t in self._brokers]
        for t in threads:
            t.join(timeout)

    def _start_tube(self, tube: str) -> list[Broker]:
        started = []
        with self._lock:
            if tube in self._tubes:
                return []
            self._tubes.append(tube)
            for slot in range(self.config.per_tube):
                broker = Broker(
                    self.config,
                    tube,
                    slot,
                    self._observer,
                    stop=self._stop,
                    kill=self._kill,
                    kill_now=self._kill_now,
                    budget=self._budget,
                    outage=self._outage,
                )
                thread = threading.Thread(
                    target=broker.run, name=f"cmdstalk-{broker.where}", daemon=True
                )
                self._brokers.append((broker, thread))
                started.append((broker, thread))
        for _, thread in started:
            thread.start()
        log.info("serving tube %s with %d broker(s)", tube, self.config.per_tube)
        return [b for b, _ in started]

    def _discover_loop(self) -> None:
        conn = self._discovery_conn
        try:
            while not self._stop.is_set() and not self._budget.spent:
                try:
                    names = conn.client().tubes()
                except Stopped:
                    return
                except CONNECTION_ERRORS as e:
                    conn.drop(e)
                    continue
                for name in names:
                    started = self._start_tube(name)
                    if not self._discovered.is_set():
                        self._initial.extend(started)
                self._discovered.set()
                self._stop.wait(self.config.discover_interval)
        except Exception:  # never take the process down; brokers already started go on
            log.exception("tube discovery failed; no new tubes will be served")
        finally:
            conn.close()
