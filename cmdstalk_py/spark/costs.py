"""What jobs cost, from the figures of event-log schema 4 (``peak_memory_bytes``, ``cpu_s``):
the aggregates per tube (and per window) and the jobs that cost most in each tube.

A figure's percentiles, maximum and count cover the jobs that have it: records from before
schema 4, and figures the supervisor did not measure (peak memory is sampled only while a
limit is set), are null and count nowhere. A tube without any has null figures and a count
of 0. Percentiles are ``percentile_approx`` at the accuracy the report passes, as for
durations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.window import Window as SparkWindow

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Figure(NamedTuple):
    """One figure of a job's cost: its name in the report, event-log column and unit."""

    name: str
    column: str
    unit: str


FIGURES = (Figure("memory", "peak_memory_bytes", "bytes"), Figure("cpu", "cpu_s", "s"))
PERCENTILES = ((0.5, "p50"), (0.95, "p95"))
#: Jobs per tube in each "cost most" ranking unless ``--top`` says otherwise.
TOP_COSTLIEST = 10

#: The cost columns of a window or tube row, in order.
COST_COLUMNS = [
    column
    for f in FIGURES
    for column in (
        f"{f.name}_jobs",
        *(f"{f.name}_{label}_{f.unit}" for _, label in PERCENTILES),
        f"{f.name}_max_{f.unit}",
    )
]
#: The rows of the "cost most" table: per tube, ``by`` memory or cpu, ``rank`` from 1.
COSTLIEST_COLUMNS = [
    "tube", "by", "rank", "job_id", "outcome", "peak_memory_bytes", "cpu_s", "procs",
    "start", "hostname", "server",
]  # fmt: skip


def cost_aggs(accuracy: int) -> list[Column]:
    """Aggregates for ``groupBy(...).agg``: per figure its count, a percentile array (a
    private column :func:`unpack_costs` turns into ``COST_COLUMNS``) and its maximum."""
    quantiles = [p for p, _ in PERCENTILES]
    aggs: list[Column] = []
    for f in FIGURES:
        aggs += [
            F.count(f.column).alias(f"{f.name}_jobs"),  # count(column) skips nulls
            F.percentile_approx(f.column, quantiles, accuracy).alias(f"_{f.name}"),
            F.max(f.column).alias(f"{f.name}_max_{f.unit}"),
        ]
    return aggs


def unpack_costs(df: DataFrame) -> DataFrame:
    """The percentile arrays of :func:`cost_aggs` as one column each (null when the group
    had no job with the figure)."""
    out = df
    for f in FIGURES:
        for i, (_, label) in enumerate(PERCENTILES):
            out = out.withColumn(f"{f.name}_{label}_{f.unit}", F.col(f"_{f.name}")[i])
    return out.drop(*(f"_{f.name}" for f in FIGURES))


def costliest(events: DataFrame, top: int) -> DataFrame:
    """Per tube the ``top`` jobs with the highest peak memory and the ``top`` with the most
    CPU seconds, as ``COSTLIEST_COLUMNS``. Ties go to the earlier start, then the lower job
    id, so a report run twice ranks alike. Jobs without the figure are not ranked."""
    ranked = []
    for f in FIGURES:
        order = (F.desc(f.column), F.asc("start_ts"), F.asc("job_id"))
        rank = F.row_number().over(SparkWindow.partitionBy("tube").orderBy(*order))
        ranked.append(
            events.where(F.col(f.column).isNotNull())
            .withColumn("rank", rank)
            .where(F.col("rank") <= top)
            .withColumn("by", F.lit(f.name))
            .withColumn("start", F.col("start_ts"))
            .select(*COSTLIEST_COLUMNS)
        )
    return ranked[0].unionByName(ranked[1])
