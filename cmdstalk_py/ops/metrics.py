"""Prometheus metrics for ``cmdstalk --metrics HOST:PORT`` (prometheus-client, imported lazily).

Supervisor-side metrics come from Observer calls; queue-side gauges come from ``stats-tube``
on each watched tube of every server (label ``server``), refreshed by one background thread
per server with its own connection. Everything
lives in a private registry, so two exporters in one process (tests) do not collide.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from cmdstalk_py.ops.observers import Observer, TubeHold
from cmdstalk_py.supervisor.results import JobResult

log = logging.getLogger("cmdstalk.metrics")

# Jobs run from milliseconds (a shell one-liner) to the longest TTRs people set (an hour).
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# Reserve waits are bounded by the broker's short reserve timeout, then start over.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# A job's tree peaks from a few MiB (a shell and a small tool) to the tens of GiB a runaway
# converter reaches before --max-memory or the kernel stops it: powers of two, 4 MiB-32 GiB.
MEMORY_BUCKETS = tuple(float(4 << 20 << n) for n in range(14))
# A tree's CPU seconds run from a one-liner's milliseconds to an hour-long TTR's worth (more
# with several cores busy; those land in +Inf): the duration buckets fit.
CPU_BUCKETS = DURATION_BUCKETS
# stats-tube field → label of cmdstalk_tube_jobs. These four partition a tube's jobs, so
# sum by (tube) is the tube's total; urgent (a subset of ready) has a gauge of its own.
JOB_STATES = {
    "current-jobs-ready": "ready",
    "current-jobs-delayed": "delayed",
    "current-jobs-buried": "buried",
    "current-jobs-reserved": "reserved",
}
STATS_TIMEOUT = 5.0  # seconds for the stats connection's connect and each reply


def parse_hostport(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``:PORT`` → (host, port); ValueError when malformed.

    ``:PORT`` means ``default_host``: loopback, as metrics name tubes and job counts that
    are nobody else's business unless the operator gives a host (``0.0.0.0:PORT``).
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port out of range in {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host or default_host), port


class QueueStatsPoller:
    """Refreshes one server's queue-side gauges from ``stats-tube`` every ``interval``
    seconds, for ``tubes(address)``: the tubes of the pools serving that server (one the
    server lacks has no series there).

    Connection errors are logged once per outage and retried at the next tick; the thread
    never dies of them.
    """

    def __init__(
        self,
        address: str,
        tubes: Callable[[str], list[str]],
        interval: float,
        jobs: Any,
        urgent: Any,
        waiting: Any,
        up: Any,
    ) -> None:
        self._address = parse_hostport(address)
        self._server = address  # the label, as the event log and server_jobs name it
        self._tubes = tubes
        self._interval = interval
        self._jobs, self._urgent, self._waiting, self._up = jobs, urgent, waiting, up
        up.labels(server=address).set(0)  # each server has its series before it answers
        self._client: Any = None
        self._shown: set[str] = set()
        self._outage = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"metrics-queue-stats-{address}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            # At start-up the dispatcher may not know its tubes yet: look again soon rather
            # than show no queue gauges for a whole interval.
            self._stop.wait(self._interval if self._shown else min(self._interval, 0.5))
        self._disconnect()

    def _connect(self) -> Any:
        import greenstalk

        # Our own socket so every reply has a timeout: a hung server must not hang close().
        sock = socket.create_connection(self._address, timeout=STATS_TIMEOUT)
        return greenstalk.Client(sock)

    def _disconnect(self) -> None:
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.close()
            self._client = None

    def refresh(self) -> bool:
        """One refresh of every watched tube's gauges; False (and gauges kept) on failure."""
        import greenstalk

        try:
            wanted = list(self._tubes(self._server))
        except Exception:
            log.exception("metrics: cannot list watched tubes")
            return False
        try:
            if self._client is None:
                self._client = self._connect()
            seen: set[str] = set()
            for tube in wanted:
                try:
                    stats = self._client.stats_tube(tube)
                except greenstalk.NotFoundError:
                    continue  # an empty tube nobody watches does not exist on the server
                self._set(tube, stats)
                seen.add(tube)
        except (OSError, greenstalk.Error) as exc:
            self._disconnect()
            if not self._outage:
                log.warning("metrics: stats-tube on %s:%d failed: %s", *self._address, exc)
            self._outage = True
            self._up.labels(server=self._server).set(0)
            return False
        if self._outage:
            log.info("metrics: stats-tube on %s:%d works again", *self._address)
        self._outage = False
        self._up.labels(server=self._server).set(1)
        for gone in self._shown - seen:
            self._remove(gone)
        self._shown = seen
        return True

    def _set(self, tube: str, stats: Any) -> None:
        server = self._server
        for field, state in JOB_STATES.items():
            self._jobs.labels(server=server, tube=tube, state=state).set(int(stats[field]))
        self._urgent.labels(server=server, tube=tube).set(int(stats["current-jobs-urgent"]))
        self._waiting.labels(server=server, tube=tube).set(int(stats["current-waiting"]))

    def _remove(self, tube: str) -> None:
        for state in JOB_STATES.values():
            self._jobs.remove(self._server, tube, state)
        self._urgent.remove(self._server, tube)
        self._waiting.remove(self._server, tube)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * STATS_TIMEOUT)

    def forget(self) -> None:
        """The server is no longer served (a reload dropped it): stop, remove its series."""
        self.close()
        self._disconnect()
        for tube in self._shown:
            self._remove(tube)
        self._shown = set()
        with contextlib.suppress(KeyError):
            self._up.remove(self._server)


class MetricsExporter(Observer):
    """The Observer ``start_metrics`` returns; ``address`` is where it actually listens,
    ``servers`` (one HOST:PORT, several, or a function returning them as configured now)
    those whose queues it shows: a server a reload adds gets its queue gauges, one it
    drops loses them (checked at each heartbeat and each on-demand render).

    With ``listen`` None it serves nothing itself: ``render()`` gives the page to another
    server (the dashboard's ``/metrics``). With ``interval`` 0 no thread polls the queue
    gauges: each ``render()`` refreshes them, so nobody scraping costs the server nothing.
    """

    def __init__(
        self,
        listen: str | None,
        servers: str | Sequence[str] | Callable[[], Sequence[str]],
        tubes: Callable[[str], list[str]],
        interval: float,
    ):
        import prometheus_client as prom

        self.registry = r = prom.CollectorRegistry(auto_describe=True)
        tube = ["tube"]
        self.jobs_finished = prom.Counter(
            "cmdstalk_jobs_finished", "Jobs finished, by outcome.", [*tube, "outcome"], registry=r
        )
        self.job_duration = prom.Histogram(
            "cmdstalk_job_duration_seconds", "Run time of job commands that ran.", tube,
            buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.brokers_busy = prom.Gauge(
            "cmdstalk_brokers_busy", "Brokers running a job.", tube, registry=r
        )
        self.brokers_idle = prom.Gauge(
            "cmdstalk_brokers_idle", "Brokers waiting for a job.", tube, registry=r
        )
        self.reserve_wait = prom.Histogram(
            "cmdstalk_reserve_wait_seconds", "Time in reserve before a job arrived.", tube,
            buckets=WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.reconnects = prom.Counter(
            "cmdstalk_reconnects", "Reconnections to the server, by broker (tube:slot) or "
            "dispatcher.", ["where"], registry=r,
        )  # fmt: skip
        self.process_kills = prom.Counter(
            "cmdstalk_process_kills", "Signals sent to job process groups.", [*tube, "signal"],
            registry=r,
        )  # fmt: skip
        pool_tube = ["pool", "tube"]
        # Per pool and tube like the tube gauges below, and like them no server or outcome
        # label: a series per tube a pool serves, each of a dozen buckets.
        self.job_memory = prom.Histogram(
            "cmdstalk_job_peak_memory_bytes", "Peak resident memory of a finished job's "
            "process tree, where known.", pool_tube, buckets=MEMORY_BUCKETS, registry=r,
        )  # fmt: skip
        self.job_cpu = prom.Histogram(
            "cmdstalk_job_cpu_seconds", "User + system CPU of a finished job's process tree, "
            "where known.", pool_tube, buckets=CPU_BUCKETS, registry=r,
        )  # fmt: skip
        self.server_jobs = prom.Counter(
            "cmdstalk_server_jobs_finished", "Jobs finished, by pool, server and outcome.",
            ["pool", "server", "outcome"], registry=r,
        )  # fmt: skip
        self.running_gauge = prom.Gauge(
            "cmdstalk_tube_running", "Running jobs of a tube with a limit or rate, per pool.",
            pool_tube, registry=r,
        )  # fmt: skip
        self.tube_limit = prom.Gauge(
            "cmdstalk_tube_limit", "The per-tube limit (--tube-limit), per pool.", pool_tube,
            registry=r,
        )  # fmt: skip
        self.held_gauge = prom.Gauge(
            "cmdstalk_tube_held", "1 while a tube is held back by its limit or its rate: its "
            "jobs stay queued.", [*pool_tube, "reason"], registry=r,
        )  # fmt: skip
        self.loop_lag_gauge = prom.Gauge(
            "cmdstalk_loop_lag_seconds", "The longest the supervisor's event loop was held "
            "between two polls lately: what a kill point or a job start may wait behind.",
            registry=r,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._busy: dict[tuple[str, int], bool] = {}
        self._gauges = _queue_gauges(r)
        self._tubes, self._interval = tubes, interval
        if callable(servers):
            self._served: Callable[[], Sequence[str]] = servers
        else:
            fixed = [servers] if isinstance(servers, str) else list(servers)
            self._served = lambda: fixed
        self._pollers: dict[str, QueueStatsPoller] = {}
        self._server: Any = None
        self.address: tuple[str, int] = ("", 0)
        if listen is not None:
            host, port = parse_hostport(listen)
            self._server, self._server_thread = prom.start_http_server(port, addr=host, registry=r)
            bound = self._server.server_address
            self.address = (str(bound[0]), int(bound[1]))
        self._on_demand = interval <= 0
        self._render_lock = threading.Lock()
        self._closed = False
        self._follow_servers()

    def _follow_servers(self) -> None:
        """Pollers for exactly the servers served now (a reload may add or drop some)."""
        with self._lock:
            if self._closed:
                return
            wanted = dict.fromkeys(self._served())
            for server in wanted.keys() - self._pollers.keys():
                poller = QueueStatsPoller(server, self._tubes, self._interval, *self._gauges)
                self._pollers[server] = poller
                if not self._on_demand:
                    poller.start()
            gone = [self._pollers.pop(server) for server in self._pollers.keys() - wanted]
        for poller in gone:
            poller.forget()

    def heartbeat(self) -> None:
        self._follow_servers()

    @property
    def port(self) -> int:
        """The TCP port serving ``/metrics`` (useful after listening on port 0)."""
        return self.address[1]

    def refresh_queue_stats(self) -> bool:
        """Refresh the queue-side gauges now (the background threads also do, every
        interval); False if a server's refresh failed."""
        self._follow_servers()
        with self._lock:
            pollers = list(self._pollers.values())
        return all([poller.refresh() for poller in pollers])

    def render(self) -> tuple[bytes, str]:
        """The metrics page and its content type."""
        import prometheus_client as prom

        if self._on_demand:
            with self._render_lock:  # one stats connection a server, one refresh at a time
                self.refresh_queue_stats()
        return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST

    def job_finished(self, result: JobResult) -> None:
        self.jobs_finished.labels(tube=result.tube, outcome=result.outcome.value).inc()
        self.server_jobs.labels(
            pool=result.pool, server=result.server, outcome=result.outcome.value
        ).inc()
        # Jobs that never ran (precheck burials, spawn failures) would pile up at zero.
        if result.exit_code is not None or result.signal is not None:
            self.job_duration.labels(tube=result.tube).observe(result.duration_ms / 1000.0)
        self._observe_cost(result)

    def _observe_cost(self, result: JobResult) -> None:
        # A figure not known (the command never ran, or was not sampled) is left out rather
        # than counted as zero, which would drag every quantile down.
        pool_tube = {"pool": result.pool, "tube": result.tube}
        if result.peak_memory_bytes is not None:
            self.job_memory.labels(**pool_tube).observe(result.peak_memory_bytes)
        if result.cpu_s is not None:
            self.job_cpu.labels(**pool_tube).observe(result.cpu_s)

    def broker_busy(self, tube: str, slot: int, busy: bool) -> None:
        # Counted from per-slot state rather than inc/dec, so a repeated call cannot drift.
        with self._lock:
            self._busy[(tube, slot)] = busy
            states = [b for (t, _), b in self._busy.items() if t == tube]
        self.brokers_busy.labels(tube=tube).set(sum(states))
        self.brokers_idle.labels(tube=tube).set(len(states) - sum(states))

    def loop_lag(self, seconds: float) -> None:
        self.loop_lag_gauge.set(seconds)

    def tube_running(self, pool: str, tube: str, running: int, limit: int | None) -> None:
        self.running_gauge.labels(pool=pool, tube=tube).set(running)
        if limit is not None:
            self.tube_limit.labels(pool=pool, tube=tube).set(limit)

    def tube_held(self, hold: TubeHold) -> None:
        for why in ("limit", "rate"):
            held = int(why == hold.reason)
            self.held_gauge.labels(pool=hold.pool, tube=hold.tube, reason=why).set(held)

    def reserve_waited(self, tube: str, seconds: float) -> None:
        self.reserve_wait.labels(tube=tube).observe(seconds)

    def reconnected(self, where: str, address: str) -> None:
        self.reconnects.labels(where=where).inc()

    def process_killed(self, tube: str, signal_name: str) -> None:
        self.process_kills.labels(tube=tube, signal=signal_name).inc()

    def close(self) -> None:
        """Stop the HTTP server and the queue-stats threads."""
        with self._lock:
            self._closed = True
            pollers = list(self._pollers.values())
        for poller in pollers:
            poller.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server_thread.join(timeout=5)


def _queue_gauges(r: Any) -> tuple[Any, Any, Any, Any]:
    """The stats-tube gauges in registry ``r``: tube jobs, urgent, waiting, up."""
    import prometheus_client as prom

    server_tube = ["server", "tube"]
    tube_jobs = prom.Gauge(
        "cmdstalk_tube_jobs", "Jobs in a watched tube by state (stats-tube), per server.",
        [*server_tube, "state"], registry=r,
    )  # fmt: skip
    urgent = prom.Gauge(
        "cmdstalk_tube_urgent_jobs", "Ready jobs with priority < 1024 (stats-tube).",
        server_tube, registry=r,
    )  # fmt: skip
    waiting = prom.Gauge(
        "cmdstalk_tube_waiting_clients", "Clients reserving on the tube (stats-tube).",
        server_tube, registry=r,
    )  # fmt: skip
    up = prom.Gauge(
        "cmdstalk_queue_stats_up", "1 if the last stats-tube refresh of the server "
        "succeeded.", ["server"], registry=r,
    )  # fmt: skip
    return tube_jobs, urgent, waiting, up


def start_metrics(
    listen: str,
    servers: str | Sequence[str] | Callable[[], Sequence[str]],
    tubes: Callable[[str], list[str]],
    interval: float = 5.0,
) -> MetricsExporter:
    """Serve Prometheus metrics on ``listen`` (HOST:PORT); watch ``tubes(server)`` on each
    of ``servers`` (HOST:PORT, one or several).

    Brokers should call ``broker_busy(tube, slot, False)`` when they start, so idle brokers
    are counted before their first job. Raises ValueError for a malformed ``listen`` and
    OSError when the port cannot be bound.
    """
    return MetricsExporter(listen, servers, tubes, interval)
