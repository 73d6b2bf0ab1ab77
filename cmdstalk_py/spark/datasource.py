"""The ``beanstalkd`` Spark data source: every row of a DataFrame becomes one job.

    df.write.format("beanstalkd").option("address", "127.0.0.1:11300") \\
        .option("tube", "emails").mode("append").save()

Columns: ``body`` (string or binary, required; strings are sent as UTF-8); optional ``tube``
(string), ``priority``, ``delay``, ``ttr`` (integers) override the options per row where not
null. Any other column is an error, so a misspelt override never goes silently unused.

Options: ``address`` (``host:port``, or several separated by commas, default
127.0.0.1:11300), ``tube`` (default
``default``), ``priority`` (1024), ``delay`` (0), ``ttr`` (60), and ``summary_path``: a file
on the driver where the commit writes the per-partition row counts as JSON (``enqueue`` uses
it to return the count).

With several servers the rows are spread by partition, round robin (``servers``): partition
``p`` writes every row to server ``p % n``, so have at least as many partitions as servers.
Every server is checked before any task starts; a write that fails names the server.

Delivery is at-least-once. Each partition is one Spark task with one connection; jobs are
visible to workers as soon as the server acknowledges them, and beanstalkd has no
transactions. A put that fails (an error reply such as JOB_TOO_BIG or DRAINING, an invalid
row, a lost connection) fails its partition without a Spark retry, so no row is put twice
by our own failures; the write then fails naming partition, row and reply, and counts the
jobs that were put (see ``writeresult``). Only a task killed from outside (a lost executor)
is re-run by Spark (``spark.task.maxFailures``, 4 on a cluster): the rows its lost attempt
had put are enqueued again, and the summary reports that bound as possible duplicates. A
write that fails after some partitions succeeded leaves those partitions' jobs in the queue.
Commands that must not run twice should deduplicate on the job content (see
``with_idempotency_key``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from cmdstalk_py.client.names import DEFAULT_ADDRESS, check_u32, tube_bytes
from cmdstalk_py.spark.putter import PutFailed, Putter
from cmdstalk_py.spark.servers import check_servers, parse_servers, server_for
from cmdstalk_py.spark.writeresult import EnqueueFailed, EnqueueSummary, PartitionCommit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

BODY = "body"
OVERRIDES = {"tube": (StringType,), "priority": (ByteType, ShortType, IntegerType, LongType)}
OVERRIDES["delay"] = OVERRIDES["priority"]
OVERRIDES["ttr"] = OVERRIDES["priority"]


@dataclass(frozen=True)
class WriteOptions:
    """The data source's options, validated on the driver before any task starts."""

    address: str = DEFAULT_ADDRESS
    tube: str = "default"
    priority: int = 1024
    delay: int = 0
    ttr: int = 60
    summary_path: str | None = None

    @classmethod
    def parse(cls, options: dict[str, str]) -> WriteOptions:
        """From Spark's (case-insensitive, string-valued) option map; ValueError if invalid."""
        opts = {k.lower(): v for k, v in options.items()}
        known = {"address", "tube", "priority", "delay", "ttr", "summary_path", "path"}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ValueError(f"unknown beanstalkd data source option(s): {', '.join(unknown)}")
        out = cls(
            address=opts.get("address", DEFAULT_ADDRESS),
            tube=opts.get("tube", "default"),
            priority=int(opts.get("priority", "1024")),
            delay=int(opts.get("delay", "0")),
            ttr=int(opts.get("ttr", "60")),
            summary_path=opts.get("summary_path"),
        )
        parse_servers(out.address)
        tube_bytes(out.tube)
        for name in ("priority", "delay", "ttr"):
            check_u32(name, getattr(out, name))
        return out

    @property
    def servers(self) -> tuple[str, ...]:
        """The servers the rows are spread over (``address`` split at its commas)."""
        return parse_servers(self.address)


def check_schema(schema: StructType) -> None:
    """ValueError unless ``schema`` has a string/binary ``body`` and only known overrides."""
    fields = {f.name.lower(): f for f in schema.fields}
    if BODY not in fields:
        raise ValueError(f"the beanstalkd data source needs a 'body' column; got {schema.names}")
    if not isinstance(fields[BODY].dataType, StringType | BinaryType):
        raise ValueError(f"column 'body' must be string or binary, not {fields[BODY].dataType}")
    for name, f in fields.items():
        if name == BODY:
            continue
        if name not in OVERRIDES:
            hint = (
                " (a job carries only its body: the idempotency key is the body's SHA-256,"
                " see with_idempotency_key)"
                if name == "key"
                else ""
            )
            raise ValueError(
                f"unexpected column {f.name!r}: allowed are body, tube, priority, delay, ttr{hint}"
            )
        if not isinstance(f.dataType, OVERRIDES[name]):
            raise ValueError(f"column {f.name!r} has type {f.dataType}, expected {OVERRIDES[name]}")


def _bodies(column: pa.Array) -> list[bytes]:
    # string → binary is a zero-copy cast in Arrow; to_pylist then yields bytes directly.
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    values: list[bytes] = column.to_pylist()
    return values


class BeanstalkdWriter(DataSourceArrowWriter):
    """Writes each partition through one pipelined connection (see ``putter``)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PartitionCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else -1
        attempt = ctx.attemptNumber() if ctx is not None else 0
        o = self.options
        server = server_for(o.servers, partition)
        started = time.monotonic()
        put: Putter | None = None
        try:
            with Putter(server, o.tube, o.priority, o.delay, o.ttr, partition=partition) as put:
                try:
                    _put_batches(put, iterator, partition)
                except (ValueError, PutFailed) as exc:
                    if isinstance(exc, PutFailed) and exc.reply != "INVALID_ROW":
                        raise
                    # Rows before the invalid one are put, as they would have been had
                    # they filled a window first; the count stays exact.
                    rows = put.finish().rows
                    raise PutFailed(
                        str(exc),
                        reply="INVALID_ROW",
                        partition=partition,
                        row=put.queued,
                        acknowledged=rows,
                    ) from exc
                stats = put.finish()
        except PutFailed as exc:
            # Returned, not raised: Spark would retry the task and put the rows before the
            # failure again (see writeresult).
            tubes = put.stats.per_tube if put is not None else {}
            return PartitionCommit(
                partition=partition,
                rows=exc.acknowledged,
                body_bytes=0,
                seconds=time.monotonic() - started,
                per_tube={t: exc.acknowledged for t in tubes} if len(tubes) == 1 else {},
                attempt=attempt,
                error=str(exc),
                reply=exc.reply,
                row=exc.row,
                unconfirmed=exc.unconfirmed,
                server=server,
            )
        return PartitionCommit(
            partition=partition,
            rows=stats.rows,
            body_bytes=stats.body_bytes,
            seconds=time.monotonic() - started,
            per_tube=stats.per_tube,
            attempt=attempt,
            server=server,
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        summary = self._summarise(messages)
        if summary.failures and not self.options.summary_path:
            raise EnqueueFailed(summary)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._summarise(messages)

    def _summarise(self, messages: list[WriterCommitMessage | None]) -> EnqueueSummary:
        summary = EnqueueSummary.from_commits(
            [m for m in messages if isinstance(m, PartitionCommit)]
        )
        if self.options.summary_path:
            tmp = self.options.summary_path + ".tmp"
            Path(tmp).write_text(json.dumps(summary.to_json()))
            os.replace(tmp, self.options.summary_path)
        return summary


def _put_batches(put: Putter, iterator: Iterator[pa.RecordBatch], partition: int) -> None:
    for batch in iterator:
        names = [n.lower() for n in batch.schema.names]
        body_col = batch.column(names.index(BODY))
        if body_col.null_count:
            first_null = body_col.is_null().to_pylist().index(True)
            raise ValueError(
                f"beanstalkd write (partition {partition}): row "
                f"{put.queued + first_null} has a null body"
            )
        extra: dict[str, Sequence[Any] | None] = {}
        for name in ("tube", "priority", "delay", "ttr"):
            if name in names:
                extra[name] = batch.column(names.index(name)).to_pylist()
            else:
                extra[name] = None
        put.put_batch(
            _bodies(body_col),
            tubes=extra["tube"],
            priorities=extra["priority"],
            delays=extra["delay"],
            ttrs=extra["ttr"],
        )


class BeanstalkdDataSource(DataSource):
    """``format("beanstalkd")``: a write-only data source that puts one job per row."""

    @classmethod
    def name(cls) -> str:
        return "beanstalkd"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("the beanstalkd data source only appends: use mode('append')")
        check_schema(schema)
        options = WriteOptions.parse(dict(self.options))
        if len(options.servers) > 1:
            check_servers(options.servers)  # on the driver, before any task (see write_jobs)
        return BeanstalkdWriter(options)


def _registered(spark: SparkSession) -> bool:
    try:  # Spark's own registry; not a public API, so any surprise means "not known"
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(BeanstalkdDataSource.name()))
    except Exception:
        return False


def register(spark: SparkSession) -> None:
    """Make ``format("beanstalkd")`` available on ``spark`` (again is harmless)."""
    if _registered(spark):
        return  # registering again would log a warning in the application's log
    try:
        spark.dataSource.register(BeanstalkdDataSource)
    except Exception as exc:  # pyspark's AnalysisException: the name is already taken
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise


def write_jobs(
    df: DataFrame,
    tube: str = "default",
    address: str | Sequence[str] = DEFAULT_ADDRESS,
    *,
    priority: int = 1024,
    delay: int = 0,
    ttr: int = 60,
) -> EnqueueSummary:
    """Enqueue every row of ``df`` (see the module doc for columns); the commit's summary.
    ``EnqueueFailed`` (with the summary: what was put) when a partition failed.

    ``address``: one ``host:port``, several separated by commas, or a list; with several,
    each is checked first (``ServerUnreachable``, nothing enqueued, when one does not
    answer) and the partitions are spread over them round robin."""
    servers = parse_servers(address)
    if len(servers) > 1:
        # One server down would leave a partial write behind; with a single server every
        # partition fails before its first put and names the server itself.
        check_servers(servers)
    register(df.sparkSession)
    with tempfile.TemporaryDirectory(prefix="cmdstalk-enqueue-") as tmp:
        summary = Path(tmp) / "summary.json"
        (
            df.write.format("beanstalkd")
            .option("address", ",".join(servers))
            .option("tube", tube)
            .option("priority", str(priority))
            .option("delay", str(delay))
            .option("ttr", str(ttr))
            .option("summary_path", str(summary))
            .mode("append")
            .save()
        )
        result = EnqueueSummary.from_json(json.loads(summary.read_text()))
    if result.failures:
        raise EnqueueFailed(result)
    return result


def enqueue(
    df: DataFrame,
    tube: str = "default",
    address: str | Sequence[str] = DEFAULT_ADDRESS,
    *,
    priority: int = 1024,
    delay: int = 0,
    ttr: int = 60,
) -> int:
    """Enqueue every row of ``df`` as a job; the number of jobs the servers acknowledged.
    ``address``: one server or several (see ``write_jobs``)."""
    summary = write_jobs(df, tube, address, priority=priority, delay=delay, ttr=ttr)
    return summary.rows


def enqueue_stream(
    stream_df: DataFrame,
    tube: str,
    address: str | Sequence[str] = DEFAULT_ADDRESS,
    *,
    checkpoint_location: str,
    available_now: bool = False,
    processing_time: str | None = None,
    priority: int = 1024,
    delay: int = 0,
    ttr: int = 60,
) -> StreamingQuery:
    """Start a streaming query that enqueues each micro-batch (``foreachBatch``).

    Delivery is at-least-once here too: after a crash, the query restarts from its
    checkpoint and re-runs the last micro-batch that was not recorded as committed.
    ``available_now`` processes what is there and stops; otherwise ``processing_time``
    (e.g. ``"10 seconds"``) sets the trigger interval.
    """

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        enqueue(batch, tube, address, priority=priority, delay=delay, ttr=ttr)

    writer = stream_df.writeStream.foreachBatch(each_batch).option(
        "checkpointLocation", checkpoint_location
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time is not None:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def with_idempotency_key(df: DataFrame, column: str = "idempotency_key") -> DataFrame:
    """``df`` plus the key a command will see in ``CMDSTALK_IDEMPOTENCY_KEY`` for its row:
    ``sha256:`` + the hex SHA-256 of the body's bytes. Keep it to reconcile which rows ran;
    drop it (select ``body`` and the overrides) before writing."""
    from pyspark.sql import functions as F

    raw = F.col(BODY).cast("binary")
    return df.withColumn(column, F.concat(F.lit("sha256:"), F.sha2(raw, 256)))
