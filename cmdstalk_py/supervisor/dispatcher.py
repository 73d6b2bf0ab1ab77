"""The dispatcher: which pools run, and a reload's switch from one set of pools to the next.

A supervisor runs a tuple of ``Config``s, one per pool (the command line makes one; a
config file several); each is a ``pool.Pool`` with its own workers and stop event.
``reload(configs)`` compares by pool name: an added pool starts; a removed one stops
reserving and lets its running jobs finish, as on SIGTERM; a changed one is stopped the
same way while its successor starts at once, sharing its gate, so per-tube limits count
the old pool's running jobs until they end. No running job is killed by a reload. Every
connection to one server shares one ``OutageReporter``. Everything here runs on the
supervisor's event loop: the pools' workers are its tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cmdstalk_py.client.connection import OutageReporter
from cmdstalk_py.client.names import format_address
from cmdstalk_py.loop import tools
from cmdstalk_py.ops.observers import Observer
from cmdstalk_py.process.switch import Switch
from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.pool import Pool

log = logging.getLogger("cmdstalk.dispatcher")


def as_pools(configs: Config | Sequence[Config]) -> tuple[Config, ...]:
    """One Config or several → a tuple with unique pool names (ValueError otherwise)."""
    pools = (configs,) if isinstance(configs, Config) else tuple(configs)
    if not pools:
        raise ValueError("no pools to run")
    names = [c.pool for c in pools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"pool names must be unique: {', '.join(dupes)}")
    return pools


class Dispatcher:
    """Starts and tracks pools; ``stop`` (set by the supervisor) ends reserving everywhere;
    ``kill`` and ``kill_now`` reach every pool's running commands."""

    def __init__(
        self,
        configs: Config | Sequence[Config],
        observer: Observer,
        *,
        stop: Switch,
        kill: Switch,
        kill_now: Switch,
        budget: JobBudget,
    ) -> None:
        self.configs = as_pools(configs)
        self.config = self.configs[0]
        self._observer = observer
        self._stop = stop
        self._kill = kill
        self._kill_now = kill_now
        self._budget = budget
        self._outages: dict[str, OutageReporter] = {}
        self._pools: dict[str, Pool] = {}
        self._retiring: list[Pool] = []  # removed or replaced, finishing their jobs
        self._started = False

    def outage(self, address: str) -> OutageReporter:
        """The one reporter of ``address``, shared by every connection to it."""
        reporter = self._outages.get(address)
        if reporter is None:
            reporter = self._outages[address] = OutageReporter(address)
        return reporter

    def _new_pool(self, config: Config, old: Pool | None = None) -> Pool:
        return Pool(
            config, self._observer, kill=self._kill, kill_now=self._kill_now,
            budget=self._budget, outage=self.outage, gate=old.gate if old else None,
        )  # fmt: skip

    def start(self) -> None:
        """Start every pool's workers (and discovery for ``--all`` and globs)."""
        pools = [self._new_pool(c) for c in self.configs]
        self._pools = {p.name: p for p in pools}
        self._started = True
        for pool in pools:
            pool.start()

    def reload(self, configs: Sequence[Config]) -> None:
        """Switch to ``configs`` (see the module docstring); ValueError if they are invalid."""
        new = {c.pool: c for c in as_pools(configs)}
        if self._stop.is_set():
            return  # draining: nothing new starts
        old = dict(self._pools)
        started: list[Pool] = []
        for name, pool in old.items():
            if new.get(name) != pool.config:
                self._retire(pool)
        for name, config in new.items():
            if old.get(name) is not None and old[name].config == config:
                continue
            pool = self._new_pool(config, old.get(name))
            self._pools[name] = pool
            started.append(pool)
        for name in set(old) - set(new):
            self._pools.pop(name, None)
        self.configs = tuple(self._pools[n].config for n in new)
        for pool in started:
            pool.start()
        log.info(
            "reloaded: %d pool(s); started %s; retired %s", len(new),
            ",".join(p.name for p in started) or "none",
            ",".join(n for n in old if new.get(n) != old[n].config) or "none",
        )  # fmt: skip

    def _retire(self, pool: Pool) -> None:
        pool.stop()
        self._retiring.append(pool)

    def _all_pools(self) -> list[Pool]:
        self._retiring = [p for p in self._retiring if any(not t.done() for t in p.tasks())]
        return [*self._pools.values(), *self._retiring]

    def servers(self) -> list[str]:
        """Every server of every pool as configured now (a reload may change them), named
        as ``format_address`` writes them, the first pool's first server first."""
        return [name for config in self.configs for name in _servers(config)]

    def tubes(self, server: str | None = None) -> list[str]:
        """The tubes served so far, on ``server`` (``host:port`` as ``format_address``
        writes it) or on any server: what metrics, the dashboard and its actions cover."""
        seen: dict[str, None] = {}
        for pool in self._all_pools():
            if server is None or server in _servers(pool.config):
                seen.update(dict.fromkeys(pool.tubes()))
        return list(seen)

    def brokers(self) -> list[Broker]:
        return [b for pool in self._all_pools() for b in pool.brokers()]

    def ready(self) -> bool:
        """True once every pool's initial workers are connected (or their server is down)."""
        pools = list(self._pools.values()) if self._started else []
        return bool(pools) and all(p.ready() for p in pools)

    def interrupt_idle(self) -> None:
        """Stop every pool's reserving (after ``stop`` was set): idle workers are cut short."""
        for pool in self._all_pools():
            pool.stop()

    def running(self) -> int:
        """How many worker and discovery tasks are still going."""
        return sum(not t.done() for pool in self._all_pools() for t in pool.tasks())

    async def join(self, timeout: float | None = None) -> None:
        """Wait for every pool's tasks to finish (after ``stop`` was set)."""
        tasks = [t for pool in self._all_pools() for t in pool.tasks()]
        if tasks:
            await tools.wait(tasks, timeout=timeout)


def _servers(config: Config) -> list[str]:
    return [format_address(host, port) for host, port in config.addresses]
