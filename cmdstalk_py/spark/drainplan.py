"""Where a drain's brokers go: how many per tube (and server), in which Spark task.

Pure functions of the tubes, the servers, the parallelism and the backlog the driver read;
``drain`` runs what they decide. A unit of work is a tube on a server: with several servers
every tube of every server gets at least one broker, so no server is left undrained.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
Unit = tuple[str | None, str]  # (server host:port, None for the config's own; tube)


@dataclass(frozen=True)
class BrokerSpec:
    """One broker a task runs: tube, slot within the tube, its share of --max-jobs, and the
    server it reserves from (None: the config's ``host:port``)."""

    tube: str
    slot: int
    max_jobs: int | None
    server: str | None = None


def broker_shares(units: Sequence[K], parallelism: int, backlog: Mapping[K, int]) -> dict[K, int]:
    """Brokers per tube (or per tube and server): ``parallelism`` shared out in proportion
    to each one's backlog (largest remainders first), and at least one for every one."""
    total = sum(max(0, backlog.get(t, 0)) for t in units)
    if total == 0:  # nothing to weigh by: as evenly as possible
        count = max(parallelism, len(units))
        return {
            t: count // len(units) + (1 if i < count % len(units) else 0)
            for i, t in enumerate(units)
        }
    exact = {t: parallelism * max(0, backlog.get(t, 0)) / total for t in units}
    shares = {t: int(v) for t, v in exact.items()}
    by_remainder = sorted(units, key=lambda t: exact[t] - shares[t], reverse=True)
    for t in by_remainder[: parallelism - sum(shares.values())]:
        shares[t] += 1
    return {t: max(1, n) for t, n in shares.items()}


def plan_brokers(
    tubes: tuple[str, ...],
    parallelism: int,
    max_jobs: int | None,
    backlog: Mapping[str, int] | None = None,
) -> list[list[BrokerSpec]]:
    """Brokers per task, ``parallelism`` tasks at most, on the config's own server.

    Without ``backlog``: ``max(parallelism, len(tubes))`` brokers dealt round-robin over the
    tubes and the tasks. With it: :func:`broker_shares` brokers per tube, so the biggest
    tube gets the most, each placed in the task with the least backlog per broker so far.
    ``max_jobs`` is split evenly (brokers whose share is 0 are left out).
    """
    units: list[Unit] = [(None, t) for t in tubes]
    weights: dict[Unit, int] | None = None
    if backlog is not None:
        weights = {(None, t): n for t, n in backlog.items()}
    return _plan(units, parallelism, max_jobs, weights)


def plan_server_brokers(
    servers: tuple[str, ...],
    tubes: tuple[str, ...],
    parallelism: int,
    max_jobs: int | None,
    backlog: Mapping[tuple[str, str], int] | None = None,
) -> list[list[BrokerSpec]]:
    """:func:`plan_brokers` over every (server, tube): ``backlog`` keyed by both."""
    units: list[Unit] = [(s, t) for s in servers for t in tubes]
    weights: dict[Unit, int] | None = None if backlog is None else dict(backlog.items())
    return _plan(units, parallelism, max_jobs, weights)


def _plan(
    units: list[Unit],
    parallelism: int,
    max_jobs: int | None,
    backlog: Mapping[Unit, int] | None,
) -> list[list[BrokerSpec]]:
    if parallelism < 1 or not units:
        raise ValueError("need at least one tube and a parallelism of at least 1")
    shares: dict[Unit, int] = {}
    if backlog is None:
        count = max(parallelism, len(units))
        order = [(units[k % len(units)], k // len(units)) for k in range(count)]
    else:
        shares = broker_shares(units, parallelism, backlog)
        order = [(u, slot) for u in units for slot in range(shares[u])]
    tasks: list[list[BrokerSpec]] = [[] for _ in range(parallelism)]
    load = [0.0] * parallelism
    for k, (unit, slot) in enumerate(order):
        share = None
        if max_jobs is not None:
            share = max_jobs // len(order) + (1 if k < max_jobs % len(order) else 0)
            if share == 0:
                continue
        if backlog is None:
            target = k % parallelism
        else:
            target = min(range(parallelism), key=lambda i: (load[i], len(tasks[i])))
            load[target] += backlog.get(unit, 0) / shares[unit]
        server, tube = unit
        tasks[target].append(BrokerSpec(tube, slot, share, server))
    return [t for t in tasks if t]
