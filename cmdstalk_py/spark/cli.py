"""The ``cmdstalk-spark`` command line. Spark is imported inside each command, so ``--help``
answers at once and a typo does not cost a JVM start."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from cmdstalk_py import __version__
from cmdstalk_py.client.names import DEFAULT_ADDRESS
from cmdstalk_py.spark.deadcmds import export_buried_cmd, requeue_cmd
from cmdstalk_py.spark.drainopts import drain_config, supervisor_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cmdstalk_py.spark.report import ReportFiles
    from cmdstalk_py.spark.writeresult import EnqueueSummary

# What the ``spark`` extra installs: without one of them a command says which extra to get.
_SPARK_EXTRA = frozenset({"pyspark", "pyarrow", "pandas", "matplotlib", "py4j"})


class _MissingExtra(click.ClickException):
    """A package of the ``spark`` extra is missing: a usage error (exit 2), as in cmdstalk."""

    exit_code = 2


class _Main(click.Group):
    """The command group: a failure is one line naming its cause; ``--debug`` the trace."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except ModuleNotFoundError as exc:
            package = (exc.name or "").partition(".")[0]
            if package not in _SPARK_EXTRA:
                raise
            raise _MissingExtra(
                f"cmdstalk-spark needs the spark extra ({package} is not installed): "
                "pip install 'cmdstalk-py[spark]' (from a checkout: pip install '.[spark]')"
            ) from exc
        except Exception as exc:
            if isinstance(ctx.obj, dict) and ctx.obj.get("debug"):
                raise
            from cmdstalk_py.spark.errors import cause_line

            raise click.ClickException(
                f"{cause_line(exc)} ({type(exc).__name__}; --debug shows the trace)"
            ) from exc


@contextmanager
def _session(ctx: click.Context, app: str) -> Iterator[SparkSession]:
    from pyspark.sql import SparkSession

    from cmdstalk_py.spark.session import resolve_master, spark_session

    conf: dict[str, str] = ctx.obj["conf"]
    master = resolve_master(ctx.obj["master"], conf)
    if SparkSession.getActiveSession() is None:
        click.echo(f"starting Spark ({master})...", err=True)
    # Failures reach the user as one line from us; Spark's own log (its task failures with
    # their JVM traces) only with --debug.
    level = "WARN" if ctx.obj.get("debug") else "OFF"
    with spark_session(
        master, app_name=f"cmdstalk-spark {app}", log_level=level, conf=conf
    ) as spark:
        yield spark


def _parse_conf(values: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--conf")
        conf[key.strip()] = value
    return conf


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version")
@click.option(
    "--master",
    envvar="CMDSTALK_SPARK_MASTER",
    help="Spark master URL (env CMDSTALK_SPARK_MASTER). Default: the master spark-submit "
    "or --conf spark.master gives, else local[*].",
)
@click.option(
    "--conf",
    "conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting, as spark-submit's --conf. Repeatable.",
)
@click.option(
    "--debug", is_flag=True, help="On failure show the whole trace, and Spark's warnings."
)
@click.pass_context
def main(ctx: click.Context, master: str | None, conf: tuple[str, ...], debug: bool) -> None:
    """cmdstalk on Spark: enqueue DataFrames, report on event logs, export dead letters.

    On a cluster, run it with spark-submit (the master and settings given there apply):
    spark-submit --master spark://HOST:7077 .../cmdstalk_py/spark/cli.py enqueue ...
    """
    ctx.ensure_object(dict)
    ctx.obj["master"] = master
    ctx.obj["conf"] = _parse_conf(conf)
    ctx.obj["debug"] = debug


@main.command()
@click.argument("input_path", metavar="INPUT")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "json", "csv"]),
    default="parquet",
    show_default=True,
    help="Input format (json: one object per line; csv: RFC 4180 with a header line).",
)
@click.option("--tube", default="default", show_default=True)
@click.option(
    "--address",
    default=DEFAULT_ADDRESS,
    show_default=True,
    envvar="CMDSTALK_ADDRESS",
    show_envvar=True,
    help="beanstalkd host:port; several separated by commas spread the partitions over them.",
)
@click.option("--priority", default=1024, show_default=True, type=click.IntRange(0, 2**32 - 1))
@click.option("--delay", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1))
@click.option("--ttr", default=60, show_default=True, type=click.IntRange(0, 2**32 - 1))
@click.option(
    "--body-column",
    default="body",
    show_default=True,
    help="Input column holding the job body; tube/priority/delay/ttr columns override per row.",
)
@click.option(
    "--partitions", type=click.IntRange(1), help="Repartition first (one connection each)."
)
@click.pass_context
def enqueue(
    ctx: click.Context,
    input_path: str,
    fmt: str,
    tube: str,
    address: str,
    priority: int,
    delay: int,
    ttr: int,
    body_column: str,
    partitions: int | None,
) -> None:
    """Put one job per row of INPUT (a file, directory or glob) into beanstalkd.

    INPUT (a local one: its first bytes too) and the servers are checked before Spark
    starts. With several servers (--address a:11300,b:11300) partition P writes to server
    P mod N, and --partitions N or more spreads the rows evenly.
    """
    from cmdstalk_py.client.names import tube_bytes
    from cmdstalk_py.spark.preflight import PreflightError, check_input
    from cmdstalk_py.spark.servers import ServerUnreachable, check_servers, parse_servers

    try:
        tube_bytes(tube)
        servers = parse_servers(address)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:  # before Spark starts: a JVM is not worth starting for a missing file
        check_input(input_path, fmt, body_column)
    except PreflightError as exc:
        raise click.ClickException(f"{exc}; nothing was enqueued") from exc
    try:  # nor for a server that is down
        check_servers(servers)
    except ServerUnreachable as exc:
        raise click.ClickException(f"enqueue failed, nothing was enqueued: {exc}") from exc
    from cmdstalk_py.spark.datasource import write_jobs
    from cmdstalk_py.spark.inputs import InputError, read_jobs
    from cmdstalk_py.spark.progress import Progress
    from cmdstalk_py.spark.writeresult import EnqueueFailed

    with _session(ctx, "enqueue") as spark, Progress(spark):
        try:
            df = read_jobs(spark, input_path, fmt, body_column)
        except InputError as exc:
            raise click.ClickException(f"{exc}; nothing was enqueued") from exc
        if partitions:
            df = df.repartition(partitions)
        started = time.monotonic()
        try:
            summary = write_jobs(df, tube, servers, priority=priority, delay=delay, ttr=ttr)
        except EnqueueFailed as exc:
            for line in exc.summary.warnings():
                click.echo(line, err=True)
            raise click.ClickException(f"enqueue failed: {exc}") from exc
        except ServerUnreachable as exc:  # went down after the check above
            raise click.ClickException(f"enqueue failed, nothing was enqueued: {exc}") from exc
        elapsed = time.monotonic() - started
    for line in summary.warnings():
        click.echo(line, err=True)
    rate = summary.rows / elapsed if elapsed > 0 else 0.0
    per_tube = ", ".join(f"{t}: {n}" for t, n in sorted(summary.per_tube.items()))
    click.echo(
        f"enqueued {summary.rows} jobs ({summary.body_bytes} body bytes) "
        f"to {_to(servers, summary)} "
        f"in {len(summary.partitions)} partitions, {elapsed:.1f}s, {rate:,.0f} jobs/s"
        + (f" [{per_tube}]" if per_tube else "")
    )


def _to(servers: tuple[str, ...], summary: EnqueueSummary) -> str:
    """Where the jobs went: the server, or each server with its count."""
    if len(servers) == 1:
        return servers[0]
    per_server = summary.per_server
    return ", ".join(f"{server} ({per_server.get(server, 0)})" for server in servers)


@main.command()
@click.option(
    "--events",
    "events",
    required=True,
    multiple=True,
    help="Event log files (JSON lines); globs allowed, quote them. Repeatable.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Output directory; on a cluster, storage every machine shares at the same path.",
)
@click.option(
    "--window",
    help="Window length: 30s, 15m, 1h, 1d. Default: from the log's span, at most "
    "60 windows (a 14 s drain gets 1 s windows, a day 30 min).",
)
@click.option("--overwrite", is_flag=True, help="Write into OUT although it is not empty.")
@click.option(
    "--top",
    type=click.IntRange(1, 10_000),
    default=10,  # costs.TOP_COSTLIEST, not imported here: it loads pyspark
    show_default=True,
    help="Jobs per tube in the 'cost most' tables: by peak memory, and by CPU.",
)
@click.pass_context
def report(
    ctx: click.Context,
    events: tuple[str, ...],
    out: str,
    window: str | None,
    overwrite: bool,
    top: int,
) -> None:
    """Per tube and window: jobs, jobs/s, outcome rates, duration percentiles, queue age,
    top failures, peak memory and CPU (p50, p95, max); per tube the jobs that cost most.
    Writes Parquet, CSV and report.html with charts to OUT.

    OUT must be empty or new (--overwrite replaces a report there); the event logs and OUT
    are checked before Spark starts."""
    from cmdstalk_py.spark.preflight import PreflightError, check_events, prepare_out
    from cmdstalk_py.spark.windowsize import parse_window

    try:
        size = parse_window(window) if window is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--window") from exc
    try:
        check_events(events)
        out_dir = prepare_out(out, overwrite)
    except PreflightError as exc:
        raise click.ClickException(f"report failed: {exc}") from exc
    from cmdstalk_py.spark.progress import Progress
    from cmdstalk_py.spark.report import ReportError, build_report

    with _session(ctx, "report") as spark, Progress(spark) as progress:
        try:
            files = build_report(spark, list(events), out_dir, size, progress, top)
        except ReportError as exc:
            raise click.ClickException(str(exc)) from exc
        progress.step("done")
    chosen = " (from the log's span)" if size is None else ""
    click.echo(
        f"{files.events} events ({files.rejected} rejected), {files.tubes} tubes, "
        f"{files.windows} window{'' if files.windows == 1 else 's'} of {files.window.label}"
        f"{chosen}\n{_figures_line(files)}\n"
        f"report:  {files.html}\nsummary: {files.summary_csv}\ntubes:   {files.tubes_csv}\n"
        f"costs:   {files.costliest_csv} (top {files.top} per tube by memory, by CPU)\n"
        f"parquet: {files.out / 'events'}, {files.out / 'windows'} (by tube, date), "
        f"{files.out / 'costliest'}"
    )


def _figures_line(files: ReportFiles) -> str:
    """How many jobs the cost figures cover: a log from before schema 4 has none."""
    if not (files.memory_jobs or files.cpu_jobs):
        return "no peak memory or CPU figures (event log records before schema 4 have none)"
    return f"figures of peak memory for {files.memory_jobs} jobs, of CPU for {files.cpu_jobs}"


@main.command("drain")
@supervisor_options
@click.option(
    "--parallelism",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Spark tasks running brokers (at least one broker per tube).",
)
@click.option("--max-jobs", type=click.IntRange(1), help="Stop after this many jobs in all.")
@click.option(
    "--idle-timeout",
    type=click.FloatRange(0.5),
    default=3.0,
    show_default=True,
    help="A broker stops after its tube has been empty this many seconds.",
)
@click.option(
    "--events",
    "events_path",
    type=click.Path(dir_okay=False),
    help="Event log to append to (default: cmdstalk-drain-<UTC time>.jsonl).",
)
@click.option(
    "--cwd",
    type=click.Path(file_okay=False),
    help="Directory commands run in, on every executor (default: this directory).",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Give up when beanstalkd cannot be reached for this many seconds.",
)
@click.pass_context
def drain_cmd(
    ctx: click.Context,
    /,
    parallelism: int,
    max_jobs: int | None,
    idle_timeout: float,
    events_path: str | None,
    cwd: str | None,
    connect_timeout: float,
    **options: Any,
) -> None:
    """Run cmdstalk brokers as Spark tasks until the tubes stay empty (or --max-jobs).

    The brokers are the supervisor's own code: TTR kills, backoff and bury rules (the
    policy options mean what they mean for cmdstalk). Commands run in --cwd with this
    shell's environment plus CMDSTALK_*, on whichever machine runs the task. Every job's
    result is appended to the event log, which `report` reads. With several servers
    (--address a:11300,b:11300) every tube of every server gets at least one broker, and
    the progress lines and the event log's `server` say which server a job came from.
    The servers, --cwd (on a local master) and --events are checked before Spark starts.
    """
    import datetime as dt
    import os

    from cmdstalk_py.client.names import format_address
    from cmdstalk_py.spark.drainwatch import DrainError, wait_for_servers
    from cmdstalk_py.spark.preflight import PreflightError, check_drain_paths
    from cmdstalk_py.spark.session import resolve_master

    # Taken before Spark starts: the commands get the user's environment, not Spark's.
    cwd = os.path.abspath(cwd or os.getcwd())
    environ = dict(os.environ)
    config = drain_config(**options)
    if events_path is None:
        events_path = f"cmdstalk-drain-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}.jsonl"
    master = resolve_master(ctx.obj["master"], ctx.obj["conf"])
    try:  # before Spark starts: a JVM is not worth starting for a server that is down
        check_drain_paths(cwd, events_path, local=master.startswith("local"))
        wait_for_servers([format_address(*a) for a in config.addresses], connect_timeout)
    except (PreflightError, DrainError) as exc:
        raise click.ClickException(str(exc)) from exc
    from cmdstalk_py.spark.drain import TaskSetup, drain
    from cmdstalk_py.spark.progress import Progress

    setup = TaskSetup(cwd=cwd, environ=environ, connect_timeout=connect_timeout)
    with _session(ctx, "drain") as spark, Progress(spark) as progress:
        try:
            summary = drain(
                spark,
                config,
                parallelism,
                max_jobs=max_jobs,
                idle_timeout=idle_timeout,
                events_path=events_path,
                say=progress.step,
                setup=setup,
            )
        except DrainError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo("\n".join(summary.lines()))


if __name__ == "__main__":  # spark-submit runs this file: spark-submit ... cli.py enqueue ...
    main()


main.add_command(export_buried_cmd)
main.add_command(requeue_cmd)
