"""What a ``beanstalkd`` write did: one commit message per partition, the write's summary,
and the error raised when a partition failed.

A partition that fails with a put error (an error reply such as JOB_TOO_BIG or DRAINING, an
invalid row, a lost connection) does not raise in its task: Spark would run the task again
(``spark.task.maxFailures``, 4 on a cluster) and put the partition's earlier rows once per
attempt. The task returns a commit message carrying the failure and the exact number of rows
the server acknowledged; the driver then fails the write, naming partition, row and reply.
Only what kills the task itself (a lost executor, a crashed Python worker) is retried by
Spark; a retried partition says so in its commit message (``attempt`` > 0), and the summary
counts the rows an earlier attempt may have put as possible duplicates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage


@dataclass
class PartitionCommit(WriterCommitMessage):
    """One task's report to the driver: rows and bytes enqueued, per-tube counts; for a
    failed partition the error, the row and the server's reply."""

    partition: int
    rows: int
    body_bytes: int
    seconds: float
    per_tube: dict[str, int] = field(default_factory=dict)
    attempt: int = 0
    error: str | None = None
    reply: str | None = None
    row: int | None = None
    unconfirmed: int = 0
    server: str = ""  # host:port this partition wrote to


@dataclass
class EnqueueSummary:
    """What a whole write enqueued, assembled from the partitions' commit messages.

    ``rows`` is the number of jobs the server acknowledged; ``unconfirmed`` rows were sent
    on a connection that broke before their reply; ``possible_duplicates`` bounds the rows
    an earlier, lost attempt of a retried partition may already have put.
    """

    rows: int
    body_bytes: int
    partitions: list[PartitionCommit]
    per_tube: dict[str, int]
    unconfirmed: int = 0
    possible_duplicates: int = 0

    @classmethod
    def from_commits(cls, commits: list[PartitionCommit]) -> EnqueueSummary:
        """Sum the partitions' counts."""
        per_tube: dict[str, int] = {}
        for p in commits:
            for tube, n in p.per_tube.items():
                per_tube[tube] = per_tube.get(tube, 0) + n
        return cls(
            rows=sum(p.rows for p in commits),
            body_bytes=sum(p.body_bytes for p in commits),
            partitions=sorted(commits, key=lambda p: p.partition),
            per_tube=per_tube,
            unconfirmed=sum(p.unconfirmed for p in commits),
            # A retry cannot know how far its lost predecessor got: at most the whole
            # partition, which is what this attempt put.
            possible_duplicates=sum(p.rows for p in commits if p.attempt > 0),
        )

    @property
    def failures(self) -> list[PartitionCommit]:
        """The partitions that failed, in partition order."""
        return [p for p in self.partitions if p.error is not None]

    @property
    def per_server(self) -> dict[str, int]:
        """Jobs acknowledged per server, in the order the partitions reached them."""
        out: dict[str, int] = {}
        for p in self.partitions:
            out[p.server] = out.get(p.server, 0) + p.rows
        return out

    @property
    def retried(self) -> list[PartitionCommit]:
        """The partitions Spark ran more than once (their first attempts were lost)."""
        return [p for p in self.partitions if p.attempt > 0]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnqueueSummary:
        parts = [PartitionCommit(**p) for p in data["partitions"]]
        return cls.from_commits(parts)

    def warnings(self) -> list[str]:
        """Lines a user must see even when the write succeeded."""
        out = []
        if self.retried:
            which = ", ".join(f"{p.partition} (attempt {p.attempt + 1})" for p in self.retried)
            out.append(
                f"warning: Spark re-ran partition(s) {which} after losing a task: up to "
                f"{self.possible_duplicates} of these jobs may be in the queue twice"
            )
        if self.unconfirmed:
            out.append(
                f"warning: {self.unconfirmed} rows were sent on connections that broke before "
                f"the server answered: they may or may not be in the queue"
            )
        return out


class EnqueueFailed(Exception):
    """A write in which at least one partition failed; ``summary`` counts what was put."""

    def __init__(self, summary: EnqueueSummary) -> None:
        self.summary = summary
        first = summary.failures[0]
        more = len(summary.failures) - 1
        super().__init__(
            f"{first.error}"
            + (f" (and {more} more failed partition(s))" if more else "")
            + f"; enqueued {summary.rows} jobs in all (failed partitions are not retried)"
        )
