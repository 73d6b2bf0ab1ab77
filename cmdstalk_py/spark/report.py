"""Per tube and time window metrics over event logs, and the files ``cmdstalk-spark report``
writes: Parquet (partitioned by tube and date), CSV summaries, an HTML page with charts.

Rates are fractions of the jobs that finished in the window (by start time): ``success``
(deleted), ``release`` (released for a retry), ``bury`` (buried by the exit code or the
release limit, or before running), ``timeout`` (killed at the TTR and buried), ``lost``
(the server took the job back) and ``shutdown`` (released by a supervisor shutdown); they
add up to 1. Durations, queue ages and what jobs cost (``costs``: peak memory and CPU
seconds, p50 / p95 / max over the jobs with the figure) are ``percentile_approx`` with
accuracy ``PERCENTILE_ACCURACY``: the value returned for percentile p has a rank within
``n / PERCENTILE_ACCURACY`` of ``p·n`` among the n jobs of its window (exact below
10,000 jobs per window and tube).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.window import Window as SparkWindow

from cmdstalk_py.spark import eventlog as ev
from cmdstalk_py.spark.costs import (
    COST_COLUMNS,
    COSTLIEST_COLUMNS,
    TOP_COSTLIEST,
    cost_aggs,
    costliest,
    unpack_costs,
)
from cmdstalk_py.spark.windowsize import WindowSize as WindowSize
from cmdstalk_py.spark.windowsize import parse_window as parse_window
from cmdstalk_py.spark.windowsize import window_for_span

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cmdstalk_py.spark.progress import Progress

PERCENTILE_ACCURACY = 10_000
TOP_FAILURES = 3


def _count(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0))


def _outcome_aggs() -> list[Column]:
    outcome = F.col("outcome")
    pct = [0.5, 0.9, 0.99]
    return [
        F.count(F.lit(1)).alias("jobs"),
        _count(outcome == ev.DELETED).alias("n_success"),
        _count(outcome == ev.RELEASED).alias("n_release"),
        _count(outcome.isin(*ev.BURIED)).alias("n_bury"),
        _count(outcome == ev.TIMEOUT).alias("n_timeout"),
        _count(outcome == ev.LOST).alias("n_lost"),
        _count(outcome == ev.SHUTDOWN_RELEASED).alias("n_shutdown"),
        F.percentile_approx("duration_ms", pct, PERCENTILE_ACCURACY).alias("_dur"),
        F.percentile_approx("age_s", pct, PERCENTILE_ACCURACY).alias("_age"),
        F.avg("age_s").alias("age_avg_s"),
        F.max("age_s").alias("age_max_s"),
        F.countDistinct("hostname").alias("hosts"),
        *cost_aggs(PERCENTILE_ACCURACY),
    ]


def _finish(df: DataFrame) -> DataFrame:
    """Turn counts into rates and unpack the percentile arrays."""
    out = df
    for name in ("success", "release", "bury", "timeout", "lost", "shutdown"):
        out = out.withColumn(f"{name}_rate", F.col(f"n_{name}") / F.col("jobs"))
    for i, p in enumerate(("p50", "p90", "p99")):
        out = out.withColumn(f"duration_{p}_ms", F.col("_dur")[i])
        out = out.withColumn(f"age_{p}_s", F.col("_age")[i])
    return unpack_costs(out.drop("_dur", "_age"))


def _failure_key() -> Column:
    # A failing run is a non-zero exit or death by a signal (exit_code is null then).
    return (
        F.when(F.col("signal").isNotNull(), F.col("signal"))
        .when(F.col("exit_code") != 0, F.concat(F.lit("exit "), F.col("exit_code")))
        .otherwise(F.lit(None))
    )


def _top_failures(events: DataFrame, keys: list[str]) -> DataFrame:
    """Per ``keys`` group: the most frequent failures as ``"exit 2 ×17, SIGKILL ×3"``."""
    counted = (
        events.withColumn("failure", _failure_key())
        .where(F.col("failure").isNotNull())
        .groupBy(*keys, "failure")
        .count()
    )
    rank = F.row_number().over(
        SparkWindow.partitionBy(*keys).orderBy(F.desc("count"), F.asc("failure"))
    )
    top = counted.withColumn("rank", rank).where(F.col("rank") <= TOP_FAILURES)
    listed = F.array_sort(F.collect_list(F.struct("rank", "failure", "count")))
    text = F.transform(listed, lambda s: F.concat(s["failure"], F.lit(" ×"), s["count"]))
    return top.groupBy(*keys).agg(F.array_join(text, ", ").alias("top_failures"))


def _rate(jobs: Column, start: Column, end: Column) -> Column:
    """The one definition of jobs/s: jobs over the seconds from ``start`` to ``end`` (null
    when that is not positive)."""
    span = F.unix_micros(end) - F.unix_micros(start)
    return F.when(span > 0, jobs / (span / F.lit(1e6))).otherwise(F.lit(None))


def window_metrics(events: DataFrame, window: WindowSize) -> DataFrame:
    """One row per tube and window (by job start) with counts, rates and percentiles.

    ``jobs_per_s`` divides by the part of the window the tube's log covers (its first
    start to its last end), as ``tube_totals`` does for the whole log: a log shorter than
    the window gets the same rate in both tables, not one diluted by the empty rest."""
    keyed = events.withColumn("_w", F.window("start_ts", window.interval))
    keys = ["tube", "_w"]
    metrics = _finish(keyed.groupBy(*keys).agg(*_outcome_aggs()))
    metrics = metrics.join(_top_failures(keyed, keys), keys, "left")
    spans = events.groupBy("tube").agg(F.min("start_ts").alias("_t0"), F.max("end_ts").alias("_t1"))
    metrics = metrics.join(spans, ["tube"], "left")
    rest = [c for c in metrics.columns if c not in (*keys, "_t0", "_t1")]
    covered_from = F.greatest(F.col("_w.start"), F.col("_t0"))
    covered_to = F.least(F.col("_w.end"), F.col("_t1"))
    return metrics.select(
        "tube",
        F.col("_w.start").alias("window_start"),
        F.col("_w.end").alias("window_end"),
        F.to_date(F.col("_w.start")).alias("date"),
        *rest,
        _rate(F.col("jobs"), covered_from, covered_to).alias("jobs_per_s"),
    ).withColumn("top_failures", F.coalesce(F.col("top_failures"), F.lit("")))


def tube_totals(events: DataFrame) -> DataFrame:
    """One row per tube over the whole log; jobs/s over first start to last end."""
    metrics = _finish(
        events.groupBy("tube").agg(
            *_outcome_aggs(),
            F.min("start_ts").alias("first_start"),
            F.max("end_ts").alias("last_end"),
        )
    )
    return (
        metrics.join(_top_failures(events, ["tube"]), ["tube"], "left")
        .withColumn("jobs_per_s", _rate(F.col("jobs"), F.col("first_start"), F.col("last_end")))
        .withColumn("top_failures", F.coalesce(F.col("top_failures"), F.lit("")))
    )


SUMMARY_COLUMNS = [
    "tube",
    "window_start",
    "window_end",
    "jobs",
    "jobs_per_s",
    "success_rate",
    "release_rate",
    "bury_rate",
    "timeout_rate",
    "lost_rate",
    "shutdown_rate",
    "duration_p50_ms",
    "duration_p90_ms",
    "duration_p99_ms",
    "age_avg_s",
    "age_p50_s",
    "age_p90_s",
    "age_max_s",
    "hosts",
    "top_failures",
    *COST_COLUMNS,
]
TOTAL_COLUMNS = ["tube", "first_start", "last_end", *SUMMARY_COLUMNS[3:]]


@dataclass
class ReportFiles:
    """Where a report went, and what it covered."""

    out: Path
    events: int
    rejected: int
    tubes: int
    windows: int
    window: WindowSize
    html: Path
    summary_csv: Path
    tubes_csv: Path
    costliest_csv: Path
    top: int
    #: Jobs with a peak memory figure, and with a CPU figure (0 in logs before schema 4).
    memory_jobs: int
    cpu_jobs: int


def _small_table(df: DataFrame) -> Any:
    """A small result (tubes x windows) as a pandas DataFrame, built from collected rows:
    PySpark's own toPandas does not fully support pandas 3 yet and warns on every call.
    Typed Any: pandas ships no type information."""
    import pandas as pd

    return pd.DataFrame.from_records([r.asDict() for r in df.collect()], columns=df.columns)


class ReportError(Exception):
    """The report could not be written where the driver can read it."""


def check_visible(dataset: Path, rows: int) -> None:
    """ReportError unless the driver sees the Parquet files of ``dataset`` (when it has
    rows). Executors write their part files to their own file systems: with a local path
    on a cluster whose machines do not share it, the driver finds only ``_SUCCESS``."""
    if rows and not any(dataset.rglob("*.parquet")):
        raise ReportError(
            f"the executors wrote {dataset} where this machine cannot see it (only "
            f"{', '.join(sorted(p.name for p in dataset.iterdir())) or 'nothing'} is here): "
            "on a cluster, --out must be storage every machine shares at the same path "
            "(NFS, or a directory on a one-machine cluster)"
        )


def build_report(
    spark: SparkSession,
    events_paths: str | list[str],
    out: str | Path,
    window: WindowSize | None = None,
    progress: Progress | None = None,
    top: int = TOP_COSTLIEST,
) -> ReportFiles:
    """Read the event logs, compute the metrics, write every output under ``out``.

    ``out/events`` and ``out/windows`` are Parquet datasets partitioned by ``tube`` and
    ``date`` (replaced if present), ``summary.csv`` has one line per tube and window,
    ``tubes.csv`` one per tube, ``costliest.csv`` and the Parquet ``out/costliest`` the
    ``top`` jobs of each tube by peak memory and by CPU, and ``report.html`` shows them
    all with a chart per tube (inline SVG; the same charts as PNG files in ``charts/``,
    replaced whole). ``window`` None: the length ``windowsize.window_for_span`` picks for
    the log's span.
    """
    from cmdstalk_py.spark.charts import write_html

    say = progress.step if progress is not None else (lambda message: None)
    # Absolute: executors resolve a relative path against their own working directory.
    out_dir = Path(out).absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"reading event logs {events_paths}")
    log = ev.read_events(spark, events_paths)
    events, rejected = log.events, log.rejected
    n_events, span = _count_and_span(events)
    n_rejected = rejected.count()
    say(f"{n_events} events, {n_rejected} lines rejected")
    if window is None:
        window = window_for_span(span)
        say(f"{window.label} windows for the log's {span:,.0f}s span (--window sets one)")
    say("writing events Parquet (partitioned by tube, date)")
    events.write.mode("overwrite").partitionBy("tube", "date").parquet(str(out_dir / "events"))
    check_visible(out_dir / "events", n_events)
    say(f"computing {window.label} windows per tube")
    windows = window_metrics(events, window).cache()
    windows.write.mode("overwrite").partitionBy("tube", "date").parquet(str(out_dir / "windows"))
    check_visible(out_dir / "windows", n_events)
    windows_pdf = _small_table(windows.select(*SUMMARY_COLUMNS).orderBy("tube", "window_start"))
    totals_pdf = _small_table(tube_totals(events).select(*TOTAL_COLUMNS).orderBy("tube"))
    summary_csv = out_dir / "summary.csv"
    tubes_csv = out_dir / "tubes.csv"
    windows_pdf.to_csv(summary_csv, index=False)
    totals_pdf.to_csv(tubes_csv, index=False)
    say(f"ranking the {top} jobs per tube that cost most memory and CPU")
    costliest_pdf = _write_costliest(events, out_dir, top)
    say("drawing charts and writing report.html")
    # An earlier report's charts go: a tube it had and this log has not keeps no PNG.
    shutil.rmtree(out_dir / "charts", ignore_errors=True)
    html = write_html(
        out_dir,
        windows_pdf,
        totals_pdf,
        costliest=costliest_pdf,
        title=f"cmdstalk report ({window.label} windows)",
        notes=[
            f"{n_events} events from {events_paths}; {n_rejected} lines rejected "
            "(malformed, another schema version, or no start time).",
            "Percentiles are approximate: the value shown for percentile p ranks within "
            f"n/{PERCENTILE_ACCURACY} of p·n among the window's n jobs.",
            "Memory is the peak resident memory of a job's process tree, CPU its user + "
            "system seconds; their figures cover the jobs that have them (event log "
            "schema 4 records, and memory only where it was sampled).",
        ],
    )
    windows.unpersist()
    log.release()
    return ReportFiles(
        out=out_dir,
        events=n_events,
        rejected=n_rejected,
        tubes=len(totals_pdf),
        windows=len(windows_pdf),
        window=window,
        html=html,
        summary_csv=summary_csv,
        tubes_csv=tubes_csv,
        costliest_csv=out_dir / "costliest.csv",
        top=top,
        memory_jobs=int(totals_pdf["memory_jobs"].sum()),
        cpu_jobs=int(totals_pdf["cpu_jobs"].sum()),
    )


def _write_costliest(events: DataFrame, out_dir: Path, top: int) -> Any:
    """``costliest.csv`` and the Parquet ``out_dir/costliest`` (one file: at most ``2·top``
    rows per tube); the table as pandas, for the page."""
    ranked = costliest(events, top).orderBy("tube", "by", "rank").cache()
    dataset = out_dir / "costliest"
    ranked.coalesce(1).write.mode("overwrite").parquet(str(dataset))
    table = _small_table(ranked.select(*COSTLIEST_COLUMNS))
    check_visible(dataset, len(table))
    table.to_csv(out_dir / "costliest.csv", index=False)
    ranked.unpersist()
    return table


def _count_and_span(events: DataFrame) -> tuple[int, float]:
    """The number of events and the seconds from the first start to the last end (0 for
    none), in one pass."""
    row = events.agg(
        F.count(F.lit(1)).alias("n"),
        (F.unix_micros(F.max("end_ts")) - F.unix_micros(F.min("start_ts"))).alias("span"),
    ).first()
    if row is None or not row["n"]:
        return 0, 0.0
    return int(row["n"]), max(0.0, float(row["span"] or 0) / 1e6)
