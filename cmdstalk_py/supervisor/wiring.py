"""Wiring around the supervisor: logging, observers, the embedded server, subreaping.

``run_supervisor(config, extras)`` is what ``cmdstalk`` runs once its arguments are parsed: it sets
up logging, the event log (reopened on SIGHUP), metrics and systemd notification as
observers, starts the bundled server for ``--embedded``, and runs a ``Supervisor`` until it
stops. Bad ``--events`` / ``--metrics`` values, and ``--metrics`` without the ``metrics``
extra installed, become click usage errors (exit 2) before anything starts.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import click

from cmdstalk_py import __version__
from cmdstalk_py.client.names import format_address
from cmdstalk_py.ops.eventlog import EventLog
from cmdstalk_py.ops.logsetup import configure_logging, lean_records
from cmdstalk_py.ops.observers import Observers
from cmdstalk_py.ops.systemd import SystemdNotifier
from cmdstalk_py.process import cgroup, set_child_subreaper, start_sentinel
from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.extras import Extras
from cmdstalk_py.supervisor.lifecycle import Supervisor

log = logging.getLogger("cmdstalk")


def run_supervisor(configs: Config | Sequence[Config], extras: Extras) -> int:
    """Run the supervisor (one Config per pool) with logging, observers and (optionally)
    the embedded server; with ``extras.reload`` SIGHUP reloads the pools."""
    pools = (configs,) if isinstance(configs, Config) else tuple(configs)
    config = pools[0]
    if extras.metrics is not None:
        require_extra("prometheus_client", "metrics", "--metrics")
    configure_logging(extras.log_format, extras.log_level)
    lean_records()
    observers = Observers()
    on_hup: Callable[[], None] | None = None
    if extras.events is not None:
        try:
            eventlog = EventLog(extras.events)
        except OSError as e:
            raise click.BadParameter(
                f"cannot open {extras.events}: {e}", param_hint="--events"
            ) from None
        observers.add(eventlog)
        on_hup = eventlog.reopen
    raise_open_files_limit()
    limits = _limits_mechanism(extras.limits_via)
    with _embedded_server(config, extras):
        # Descendants orphaned by a command become ours (killed ones are reaped as they are
        # killed, daemons a job left behind by the supervisor once they exit), instead of
        # init's: some container inits never reap. Nothing in this process uses subprocess,
        # so reaping any exited child that is not a running command is safe here.
        reap = set_child_subreaper() or os.getpid() == 1
        # If this process is killed (SIGKILL, OOM killer), the sentinel kills the commands
        # still running, so a restarted supervisor never runs a job beside its old run.
        start_sentinel(max(pool.kill_grace for pool in pools))  # each pool gets its grace at least
        supervisor = Supervisor(
            pools, observers, on_hup=on_hup, reload=extras.reload,
            reap_orphans=reap,
        )  # fmt: skip
        exporter = None

        # The metrics' queue gauges (label ``server``) and the dashboard follow it.
        served = supervisor.dispatcher.servers

        if extras.metrics is not None:
            from cmdstalk_py.ops.metrics import start_metrics  # imports prometheus_client

            try:
                tubes = supervisor.dispatcher.tubes
                exporter = start_metrics(extras.metrics, served, tubes)
            except (ValueError, OSError) as e:
                raise click.BadParameter(str(e), param_hint="--metrics") from None
            observers.add(exporter)
        if extras.http is not None:
            _start_dashboard(served, extras, supervisor, observers, exporter)
        # After the other observers: it removes NOTIFY_SOCKET from the environment that
        # job commands inherit. Outside systemd it would only count jobs for nobody.
        notifier = SystemdNotifier()
        if notifier.enabled:
            observers.add(notifier)
        if len(pools) == 1:
            log.info("cmdstalk %s: %s", __version__, summary(config))
        else:  # a line per pool: the first alone would pass for the whole configuration
            log.info("cmdstalk %s: %d pools", __version__, len(pools))
            for pool in pools:
                log.info("pool %s: %s", pool.pool, summary(pool))
        log.info("%s", limits)
        return supervisor.run()


def _limits_mechanism(mode: str) -> str:
    """Set up what enforces limits (before the sentinel starts: a v2 supervisor moves its
    processes into a leaf cgroup); the line to log. ``cgroup`` without one: exit 2."""
    try:
        return cgroup.configure(mode)
    except cgroup.Unusable as e:
        raise click.BadParameter(f"no cgroup to manage: {e}", param_hint="--limits-via") from None


def summary(config: Config) -> str:
    """One pool in a line: its tubes, servers, workers and command."""
    tubes = "all tubes" if config.all_tubes else "tubes " + ",".join(config.tubes)
    servers = ",".join(format_address(h, p) for h, p in config.addresses)
    workers = (
        f"{config.per_tube} per tube"
        if config.workers is None
        else f"{config.workers} shared worker(s) per server"
    )
    return f"{tubes} on {servers}, {workers}, cmd {config.cmd!r}"


def _start_dashboard(
    served: Callable[[], list[str]],
    extras: Extras,
    supervisor: Supervisor,
    observers: Observers,
    exporter: Any,
) -> None:
    """``--http``: the dashboard (imported only now) on its own asyncio loop in its own
    thread (the supervisor's loop is not asyncio's; what the dashboard reads is guarded by
    the board's lock, and a stop it asks for goes through ``request_stop``), with
    ``/metrics`` when prometheus-client is installed (the ``--metrics`` exporter's, or one
    of its own)."""
    assert extras.http is not None
    from cmdstalk_py.ops.dashboard import start_dashboard
    from cmdstalk_py.ops.dashboard.board import Board

    if exporter is None and importlib.util.find_spec("prometheus_client") is not None:
        from cmdstalk_py.ops.metrics import MetricsExporter

        # No --metrics: queue gauges refreshed only when /metrics is scraped.
        exporter = MetricsExporter(None, served, supervisor.dispatcher.tubes, 0)
        observers.add(exporter)
    board = Board()
    observers.add(board)

    def connections() -> list[dict[str, Any]]:
        return [{"where": b.where, "server": b.connection.address,
                 "connected": b.connection.connected, "error": None}
                for b in supervisor.dispatcher.brokers()]  # fmt: skip

    try:
        dashboard = start_dashboard(
            extras.http, board, served, supervisor.dispatcher.tubes,
            supervisor.request_stop, extras.http_token, connections,
            exporter.render if exporter is not None else None, extras.http_allow_host,
        )  # fmt: skip
    except (ValueError, OSError) as e:
        raise click.BadParameter(str(e), param_hint="--http") from None
    observers.add(dashboard)
    log.info("dashboard on %s%s", dashboard.url, "" if extras.http_token else " (actions off)")


def raise_open_files_limit() -> None:
    """Raise the soft limit on open descriptors to the hard one: every worker holds a
    connection and every running command three or four pipes and a pidfd, so a thousand
    tubes with six workers each need more than the usual soft limit of 1024 (Go's runtime
    does the same at start-up). The hard limit, which the administrator sets (systemd's
    ``LimitNOFILE``), stays the bound."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def require_extra(module: str, extra: str, option: str) -> None:
    """A usage error naming the extra to install when ``option`` needs a missing ``module``.

    Checked before anything starts: a service whose environment asks for metrics without
    the extra must fail once, clearly, not crash-loop with a traceback.
    """
    try:
        importlib.import_module(module)
    except ImportError:
        raise click.BadParameter(
            f"needs the {extra} extra ({module} is not installed): "
            f"pip install 'cmdstalk-py[{extra}]' (from a checkout: pip install '.[{extra}]')",
            param_hint=option,
        ) from None


@contextlib.contextmanager
def _embedded_server(config: Config, extras: Extras) -> Iterator[None]:
    if not extras.embedded:
        yield
        return
    from cmdstalk_py.server.embedded import EmbeddedServer  # type: ignore[import-not-found,unused-ignore]

    kwargs: dict[str, Any] = {}
    if extras.embedded_max_job_size is not None:
        kwargs["max_job_size"] = extras.embedded_max_job_size
    if extras.binlog is not None:
        kwargs["binlog_dir"] = extras.binlog
        kwargs["fsync_ms"] = extras.binlog_fsync_ms
        kwargs["fsync_never"] = extras.binlog_no_fsync
        if extras.binlog_size is not None:
            kwargs["segment_size"] = extras.binlog_size
    server = EmbeddedServer(config.host, config.port, **kwargs)
    try:
        server.start()
    except Exception as e:  # OSError for the port, BinlogError for a locked or foreign dir
        raise click.ClickException(
            f"cannot start the embedded server on {config.address}: {e}"
        ) from None
    try:
        log.info(
            "embedded server listening on %s%s",
            config.address,
            f", binlog in {extras.binlog}" if extras.binlog else "",
        )
        yield
    finally:
        server.stop()
