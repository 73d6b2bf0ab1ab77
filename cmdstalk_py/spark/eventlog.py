"""Reading the supervisor's event log (schema v1, v2 or v4) into Spark with a fixed schema.

The schema is the contract in the README's "Event log" section (cmdstalk_py/ops/eventlog.py writes
it). It is never inferred: inference over thousands of files is slow, and a log whose first
lines happen to have only null exit codes would infer the wrong type. Lines that are not
valid JSON objects, or carry another schema version, are counted and left out. v2 added
``pool`` and ``server``; a v1 record reads as pool ``default`` and a null server. v4 added
what the command's tree cost (``peak_memory_bytes``, ``cpu_s``, ``procs``): null in older
records. Records that are not jobs (an ``event`` key: a tube held back or servable again,
schema v3) are neither: they are skipped, so a log with them gives the same job figures as
one without.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMA_VERSION = 4
#: Every version this reader understands (v1 lacks ``pool`` and ``server``, v1 and v2 the
#: figures of v4; 3 is the version of records that are not jobs).
SCHEMA_VERSIONS = (1, 2, 4)
CORRUPT = "_corrupt_record"
#: The key only records that are not jobs carry (``tube_held``, ``tube_servable``).
EVENT_KIND = "event"
# Outcome words, as cmdstalk_py.supervisor.results.Outcome spells them.
DELETED = "deleted"
RELEASED = "released"
BURIED = ("buried", "precheck_buried")
TIMEOUT = "timeout_buried"
SHUTDOWN_RELEASED = "shutdown_released"
LOST = "lost"

EVENT_SCHEMA = StructType(
    [
        StructField("schema", IntegerType()),
        StructField("start", StringType()),
        StructField("end", StringType()),
        StructField("duration_ms", DoubleType()),
        StructField("hostname", StringType()),
        StructField("pid", LongType()),
        StructField("pool", StringType()),
        StructField("server", StringType()),
        StructField("tube", StringType()),
        StructField("slot", IntegerType()),
        StructField("job_id", LongType()),
        StructField("priority", LongType()),
        StructField("ttr", LongType()),
        StructField("releases", LongType()),
        StructField("timeouts", LongType()),
        StructField("reserves", LongType()),
        StructField("age_s", LongType()),
        StructField("payload_bytes", LongType()),
        StructField("outcome", StringType()),
        StructField("exit_code", IntegerType()),
        StructField("signal", StringType()),
        StructField("release_delay", LongType()),
        StructField("stdout_tail", StringType()),
        StructField("stderr_tail", StringType()),
        StructField("error", StringType()),
        StructField("reason", StringType()),
        StructField("killed", StringType()),
        StructField("progress", StringType()),
        # v4: what the command's tree used (null in v1 and v2 records).
        StructField("peak_memory_bytes", LongType()),
        StructField("cpu_s", DoubleType()),
        StructField("procs", LongType()),
    ]
)

_TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"


@dataclass
class EventLogData:
    """A read event log: good ``events`` and ``rejected`` lines, both over one cached scan."""

    events: DataFrame
    rejected: DataFrame
    raw: DataFrame

    def release(self) -> None:
        """Drop the cached scan."""
        self.raw.unpersist()


def read_events(spark: SparkSession, paths: str | list[str]) -> EventLogData:
    """Parse JSON-lines event logs (globs allowed) with the fixed schema.

    ``events`` has the schema-v4 columns (v1 records: pool ``default``, server null; v1
    and v2 records: null cost figures) plus ``start_ts`` / ``end_ts`` (UTC timestamps)
    and ``date`` (of start); ``rejected`` has one column, ``line``: the lines that were
    malformed, had a schema version other than 1, 2 or 4, or no parseable start time or
    tube. Records with an ``event`` key (not jobs) are in neither.
    """
    with_corrupt = StructType(
        [*EVENT_SCHEMA.fields, StructField(EVENT_KIND, StringType()),
         StructField(CORRUPT, StringType())]
    )  # fmt: skip
    raw = (
        spark.read.schema(with_corrupt)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(paths)
        .withColumn("start_ts", F.try_to_timestamp(F.col("start"), F.lit(_TS_FORMAT)))
        .withColumn("end_ts", F.try_to_timestamp(F.col("end"), F.lit(_TS_FORMAT)))
        .cache()  # Spark refuses queries on the corrupt-record column of uncached JSON
    )
    # Malformed lines parse to all nulls, so they count as jobs here and are rejected below.
    job = F.col(EVENT_KIND).isNull()
    good = (
        job
        & F.col(CORRUPT).isNull()
        & F.col("schema").isin(*SCHEMA_VERSIONS)
        & F.col("start_ts").isNotNull()
        & F.col("tube").isNotNull()
    )
    events = (
        raw.where(good)
        .drop(CORRUPT, EVENT_KIND)
        .withColumn("pool", F.coalesce(F.col("pool"), F.lit("default")))
        .withColumn("date", F.to_date("start_ts"))
    )
    rejected = raw.where(job & (~good | good.isNull())).select(
        F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*EVENT_SCHEMA.names))).alias("line")
    )
    return EventLogData(events, rejected, raw)
