"""One pool at run time: its workers on every server, tube discovery, limits and rates.

A pool is one ``Config``. On each of its servers (``Config.servers``, or the one address)
it runs either ``workers`` shared workers, each watching all the pool's tubes (the server
then hands out the most urgent job across them), or, without ``workers``, ``per_tube``
workers per tube, each watching its one tube (Go cmdstalk's meaning). Both are the same
``Broker`` with another ``WatchPlan``, each a task on the supervisor's event loop.
``--all`` and globs take the tubes from a ``Discovery`` per server (a task too); fixed
tube lists need none. One ``Gate`` per pool holds its per-tube limits and rates; when some
are set, the pool's waker (a gate subscriber and a timer, no thread) interrupts a worker
waiting in reserve when a tube it could serve becomes servable and nobody waits on it.

``stop()`` ends the pool's reserving (a reload removing or replacing it, or shutdown);
running jobs go on, as on SIGTERM.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable

from cmdstalk_py.client.connection import OutageReporter
from cmdstalk_py.client.names import format_address
from cmdstalk_py.loop.core import Timer, get_running_loop
from cmdstalk_py.loop.futures import Task
from cmdstalk_py.ops.observers import Observer, TubeHold
from cmdstalk_py.process.switch import Switch
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.brokerjob import Switches
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.config import Config, is_glob
from cmdstalk_py.supervisor.discovery import Discovery, report_crash, selector
from cmdstalk_py.supervisor.gate import Gate
from cmdstalk_py.supervisor.watchplan import WatchPlan

log = logging.getLogger("cmdstalk.dispatcher")


def dynamic(config: Config) -> bool:
    """Whether the pool's tubes come from discovery (``--all`` or a glob)."""
    return config.all_tubes or any(is_glob(t) for t in config.tubes)


class Site:
    """A pool's workers on one server (``index`` in the pool's server list)."""

    def __init__(self, pool: Pool, index: int, host: str, port: int) -> None:
        self.pool = pool
        self.index = index
        self.host, self.port = host, port
        self.address = format_address(host, port)
        self.tubes: list[str] = [] if dynamic(pool.config) else list(pool.config.tubes)
        self.workers: list[tuple[Broker, Task[int]]] = []
        self._by_tube: dict[str, list[Broker]] = {}  # --per-tube: each tube's workers
        self.initial: list[Broker] = []
        self._seen_up = 0  # initial workers seen connected so far, in order (readiness)
        self.discovery: Discovery | None = None

    def candidates(self) -> list[str]:
        return self.tubes

    def start(self) -> None:
        config = self.pool.config
        if config.workers is not None:
            self.initial = [self._start_worker(i, None) for i in range(config.workers)]
        else:
            for tube in self.candidates():
                self.initial.extend(self._start_tube(tube))
        if dynamic(config):
            self.discovery = Discovery(
                self.host, self.port, where=f"{config.pool}:discovery@{self.address}",
                select=selector(config.tubes, config.all_tubes), found=self.found,
                gone=self.gone, watchers=self.watchers, interval=config.discover_interval,
                io_timeout=config.io_timeout,
                max_wait=config.reconnect_max_wait, observer=self.pool.observer,
                outage=self.pool.outage(self.address),
            )  # fmt: skip
            self.discovery.start()

    def _start_worker(self, slot: int, tube: str | None) -> Broker:
        pool, config = self.pool, self.pool.config
        if tube is None:
            plan = WatchPlan(self.candidates, pool.gate, self.index)
            label, slot = config.pool, self.index * (config.workers or 0) + slot
        else:
            plan = WatchPlan((tube,), pool.gate, self.index)
            label, slot = tube, self.index * config.per_tube + slot
        broker = Broker(
            config, label, slot, pool.observer, switches=pool.switches, budget=pool.budget,
            outage=pool.outage(self.address), plan=plan, address=(self.host, self.port),
        )  # fmt: skip
        task = get_running_loop().create_task(broker.serve(), name=broker.where)
        task.add_done_callback(report_crash)
        self.workers.append((broker, task))
        if tube is not None:
            self._by_tube.setdefault(tube, []).append(broker)
        return broker

    def _start_tube(self, tube: str) -> list[Broker]:
        per_tube = self.pool.config.per_tube
        started = [self._start_worker(slot, tube) for slot in range(per_tube)]
        log.info("serving tube %s on %s with %d broker(s)", tube, self.address, per_tube)
        return started

    def found(self, names: Iterable[str]) -> None:
        """Discovery saw new tubes: start their workers, or have the shared ones watch them."""
        new = list(names)
        self.tubes.extend(new)
        self.pool.gate.notify()  # a worker waiting on the gate may watch them
        first = self.discovery is not None and not self.discovery.listed
        if self.pool.config.workers is None:
            for tube in new:
                started = self._start_tube(tube)
                if first:
                    self.initial.extend(started)
        else:
            log.info("pool %s on %s: now serving %s", self.pool.name, self.address, ",".join(new))
            self.rewatch_all()

    def gone(self, tube: str) -> None:
        """Discovery found ``tube`` abandoned: retire its workers, or stop watching it."""
        if tube in self.tubes:
            self.tubes.remove(tube)
        retiring = [b for b, _ in self.workers if self.pool.config.workers is None
                    and b.tube == tube and not b.retired]  # fmt: skip
        log.info("tube %s on %s is gone: no longer served", tube, self.address)
        for broker in retiring:
            broker.retired = True
            broker.interrupt()
        if self.pool.config.workers is not None:
            self.rewatch_all()
        self.prune()

    def watchers(self, tube: str) -> int:
        """Our connections to this server that watch ``tube`` (they keep it alive)."""
        # Asked of each tube discovery looks at: only the brokers that may watch it.
        brokers = self._by_tube.get(tube, []) if self.pool.config.workers is None else [
            b for b, _ in self.workers
        ]  # fmt: skip
        # Retired ones too: until their connections close, the server counts them.
        return sum(
            1 for b in brokers if b.connection.connected and tube in b.connection.watching
        )  # fmt: skip

    def rewatch_all(self) -> None:
        for broker in self.brokers():
            broker.rewatch()

    def brokers(self) -> list[Broker]:
        """The workers, less those retired (which finish a job they may hold, then end)."""
        return [b for b, _ in self.workers if not b.retired]

    def tasks(self) -> list[Task[int]]:
        self.prune()
        tasks = [t for _, t in self.workers]
        if self.discovery is not None and self.discovery.task is not None:
            tasks.append(self.discovery.task)
        return tasks

    def prune(self) -> None:
        """Forget retired workers that have ended."""
        ended = [b for b, t in self.workers if t.done() and b.retired]
        if not ended:
            return
        self.workers = [(b, t) for b, t in self.workers if not (t.done() and b.retired)]
        for broker in ended:
            tubes = self._by_tube.get(broker.tube, [])
            if broker in tubes:
                tubes.remove(broker)

    def connected(self) -> bool:
        """The first tube list is known and the initial workers are connected."""
        if self.discovery is not None and not self.discovery.listed:
            return False
        # Asked every few milliseconds while starting: go on from where the last look
        # stopped instead of walking thousands of workers each time.
        initial = self.initial
        while self._seen_up < len(initial) and initial[self._seen_up].connection.connected:
            self._seen_up += 1
        if self._seen_up < len(initial):
            return False
        return all(b.connection.connected for b in initial)

    def down(self) -> bool:
        return self.pool.outage(self.address).down


class Pool:
    """The runtime of one ``Config``: sites (one per server), the gate and its waker."""

    def __init__(
        self,
        config: Config,
        observer: Observer,
        *,
        kill: Switch,
        kill_now: Switch,
        budget: JobBudget,
        outage: Callable[[str], OutageReporter],
        gate: Gate | None = None,
    ) -> None:
        self.config = config
        self.name = config.pool
        self.observer = observer
        self.budget = budget
        self.outage = outage
        # Its own stop (a reload may retire it alone); kill and kill-now are the supervisor's.
        self.switches = Switches(Switch(), kill, kill_now)
        rates = {t: (r, b) for t, r, b in config.tube_rates}
        if gate is None:
            gate = Gate(dict(config.tube_limits), rates, time.monotonic())
        else:
            gate.reconfigure(dict(config.tube_limits), rates, time.monotonic())
        self.gate = gate
        gate.on_change = self._held
        gate.on_count = self._count
        self.sites = [Site(self, i, h, p) for i, (h, p) in enumerate(config.addresses)]
        self._wake_timer: Timer | None = None
        self._subscribed = False  # the waker is registered for the gate's next change

    @property
    def stopped(self) -> bool:
        return self.switches.stop.is_set()

    def start(self) -> None:
        for site in self.sites:
            site.start()
        if self.gate.active:
            self._check_wakes()

    def stop(self) -> None:
        """No new reservations: idle workers (each registered on the stop switch) and
        discovery are cut short, jobs run on."""
        self.switches.stop.set()
        for site in self.sites:
            if site.discovery is not None:
                site.discovery.stop()
        if self._wake_timer is not None:
            self._wake_timer.cancel()
        self.gate.notify()

    def brokers(self) -> list[Broker]:
        return [b for site in self.sites for b in site.brokers()]

    def tubes(self) -> list[str]:
        seen: dict[str, None] = {}
        for site in self.sites:
            seen.update(dict.fromkeys(site.candidates()))
        return list(seen)

    def tasks(self) -> list[Task[int]]:
        return [t for site in self.sites for t in site.tasks()]

    def ready(self) -> bool:
        """Connected on every server; with several, a server that is down waits for none."""
        up = [site for site in self.sites if site.connected()]
        return len(up) == len(self.sites) or (
            bool(up) and all(site in up or site.down() for site in self.sites)
        )

    def _check_wakes(self) -> None:
        """Wake a worker waiting in reserve for a tube that became servable unwatched; then
        look again at the gate's next change or the next rate token, whichever is first."""
        if self._wake_timer is not None:
            self._wake_timer.cancel()
            self._wake_timer = None
        if self.stopped:
            return
        gate = self.gate
        pairs, due = gate.wakes({s.index: s.candidates() for s in self.sites}, time.monotonic())
        for server, tube in pairs:
            self._wake_one(self.sites[int(str(server))], tube)
        if not self._subscribed:
            self._subscribed = True
            gate.subscribe(self._on_gate_change)
        if not math.isinf(due):
            loop = get_running_loop()
            self._wake_timer = loop.call_later(max(due, 0.001), self._check_wakes)

    def _on_gate_change(self) -> None:
        # Called inside the gate's change: look once the change is complete.
        self._subscribed = False
        get_running_loop().call_soon(self._check_wakes)

    def _wake_one(self, site: Site, tube: str) -> None:
        for broker in site.brokers():
            if tube in broker.plan.candidates() and tube not in broker.connection.watching:
                broker.rewatch()
                return

    def _held(self, tube: str, reason: str | None) -> None:
        # The log line is ``holdsettle.HoldLog``'s, one of the supervisor's observers.
        running, limit, _ = self.gate.state((tube,), time.monotonic())[tube]
        rates = {t: (r, b) for t, r, b in self.config.tube_rates}
        rate, burst = rates.get(tube, (None, None))
        self.observer.tube_held(TubeHold(self.name, tube, reason, running, limit, rate, burst))

    def _count(self, tube: str, running: int) -> None:
        self.observer.tube_running(self.name, tube, running, self.gate.limits.get(tube))

