"""Dead letters: copy a tube's buried jobs to Parquet (optionally deleting them), and put
them back from that file.

beanstalkd only shows the head of a tube's buried list (``peek-buried``). To see the rest
without making anything runnable, the export rotates the list: for the head job it sends
``reserve-job <id>`` and ``bury <id> <pri>`` in one write, which takes the job off the head
and buries it again at the tail. After as many steps as there were buried jobs, the first
job it moved is back at the head; seeing an id twice ends the walk. Jobs buried by others
during the walk land behind the first moved job and are not part of this export.

What the rotation changes on the server: each exported job's ``reserves`` and ``buries``
counters go up by one (the file records the values from before), and the buried list keeps
its order. The job is reserved by us only between two commands the server reads together;
if our connection dies in that instant the server makes the job ready, so on a lost
connection the export reconnects, puts that job back to buried if it is still there, and
fails. Concurrent changes are handled as they come: a job deleted or kicked before we reach
it is skipped (a kick landing in the microseconds between our ``stats-job`` and
``reserve-job`` is undone: the job is buried again and exported).

With ``delete``, nothing is deleted until the Parquet file is complete, fsynced, renamed
into place and its directory fsynced; then each exported job is deleted only if it is still
buried in the same tube.

Several servers (``a:11300,b:11300``): the export walks each server's list in turn into the
one file, whose ``source`` column names the server a row came from (job ids are per
server), and deletes on each server what it exported from it. ``requeue`` takes one server.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cmdstalk_py.client.errors import CONNECTION_ERRORS, BeanstalkdError, NotFound
from cmdstalk_py.client.pipeline import Client
from cmdstalk_py.client.replies import parse_int, parse_reply
from cmdstalk_py.spark.putter import Putter
from cmdstalk_py.spark.servers import one_server, parse_servers

STAT_FIELDS = (
    "priority",
    "ttr",
    "delay",
    "age",
    "reserves",
    "timeouts",
    "releases",
    "buries",
    "kicks",
)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("tube", pa.string(), nullable=False),
        pa.field("body", pa.binary(), nullable=False),
        *(pa.field(name, pa.int64()) for name in STAT_FIELDS),
        pa.field("source", pa.string()),
        pa.field("exported_at", pa.timestamp("us", tz="UTC")),
    ]
)
ROW_GROUP = 1000


class ExportError(Exception):
    """The export could not finish; nothing was deleted."""


@dataclass(frozen=True)
class BuriedJob:
    """One buried job as found: its body and its stats from before the export touched it."""

    id: int
    tube: str
    body: bytes
    stats: dict[str, int]


@dataclass
class ExportResult:
    path: Path
    jobs: int
    deleted: int = 0
    not_deleted: int = 0  # exported, but no longer buried in the tube when deleting


def _stats_job(conn: Client, job_id: int) -> Mapping[str, object] | None:
    """``stats-job``, or None when the job no longer exists."""
    try:
        return conn.stats_job(job_id)
    except NotFound:
        return None


def _delete(conn: Client, job_id: int) -> bool:
    """Delete ``job_id``; False when it no longer exists."""
    try:
        conn.delete(job_id)
    except NotFound:
        return False
    return True


def _int_stats(raw: Mapping[str, object]) -> dict[str, int]:
    names = {"pri": "priority"}
    out = {}
    for key in (
        "pri",
        "ttr",
        "delay",
        "age",
        "reserves",
        "timeouts",
        "releases",
        "buries",
        "kicks",
    ):
        out[names.get(key, key)] = int(str(raw.get(key, 0)))
    return out


def _rotate(conn: Client, job_id: int, priority: int) -> bytes | None:
    """Move buried job ``job_id`` to the tail of its buried list; its body, or None if it
    was no longer there to take."""
    conn.send(b"reserve-job %d\r\nbury %d %d\r\n" % (job_id, job_id, priority))
    line = conn.read_line()
    body = None
    if line.startswith(b"RESERVED "):
        size = parse_reply(line, b"RESERVED", 2)[1]
        body = conn.read_body(parse_int(size))
    buried = conn.read_line()
    if body is None:
        return None  # NOT_FOUND twice: deleted, or reserved by someone else, meanwhile
    if buried != b"BURIED":
        raise ExportError(f"job {job_id}: bury after reserve-job answered {buried!r}")
    return body


def _restore(address: str, tube: str, job_id: int) -> str:
    """After a lost connection: bury ``job_id`` again if the server made it ready."""
    try:
        with Client.connect(address, timeout=10) as conn:
            stats = _stats_job(conn, job_id)
            if stats is None:
                return f"job {job_id} no longer exists"
            if stats.get("state") == "buried":
                return f"job {job_id} is still buried"
            ours = stats.get("tube") == tube and stats.get("state") in ("ready", "delayed")
            if ours and _rotate(conn, job_id, int(str(stats["pri"]))) is not None:
                return f"job {job_id} was made ready by the lost connection; buried again"
            return f"job {job_id} is {stats.get('state')} in tube {stats.get('tube')}: check it"
    except (BeanstalkdError, OSError) as exc:
        return f"could not check job {job_id}: {exc}"


def iter_buried(address: str, tube: str, timeout: float = 30.0) -> Iterator[BuriedJob]:
    """Every job buried in ``tube`` when the walk starts (see the module doc), in order."""
    seen: set[int] = set()
    conn = Client.connect(address, timeout=timeout)
    try:
        conn.use(tube)
        while True:
            try:
                job_id = conn.peek_buried().id
            except NotFound:
                return  # the buried list is empty
            if job_id in seen:
                return
            raw = _stats_job(conn, job_id)
            if raw is None or raw.get("state") != "buried":
                continue  # changed under us: look at the new head
            stats = _int_stats(raw)
            try:
                body = _rotate(conn, job_id, stats["priority"])
            except CONNECTION_ERRORS as exc:
                note = _restore(address, tube, job_id)
                raise ExportError(f"connection lost while moving job {job_id} ({note})") from exc
            if body is None:
                continue
            seen.add(job_id)
            yield BuriedJob(job_id, tube, body, stats)
    finally:
        conn.close()


def _fsync_dir(path: Path, fsync: Callable[[int], None]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def _exists(path: Path) -> str:
    return (
        f"{path} exists: it may hold dead letters no longer on the server; "
        "choose another file or pass --overwrite"
    )


def _install(tmp: Path, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, path)
        return
    # link() fails if the name exists, so a file created meanwhile is never replaced.
    try:
        os.link(tmp, path)
    except FileExistsError as exc:
        raise ExportError(_exists(path)) from exc


def export_buried(
    address: str | Sequence[str],
    tube: str,
    out: str | Path,
    *,
    delete: bool = False,
    overwrite: bool = False,
    fsync: Callable[[int], None] = os.fsync,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write every buried job of ``tube`` to the Parquet file ``out``; with ``delete``,
    delete them from the server once the file is durable. An existing ``out`` is an
    ``ExportError`` unless ``overwrite``: it may hold dead letters that are no longer on
    the server. ``fsync`` is injectable so tests can check the order of events.

    ``address``: one server, several separated by commas, or a list: the buried jobs of
    ``tube`` on each go to the one file, ``source`` naming the server (ids are per server)."""
    servers = parse_servers(address)
    path = Path(out)
    if path.exists() and not overwrite:
        raise ExportError(_exists(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    exported: list[tuple[str, int]] = []  # (server, job id)
    now = dt.datetime.now(dt.UTC)
    try:
        # Job bodies are private: the file is the owner's alone from its first byte.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        with pq.ParquetWriter(tmp, SCHEMA) as writer:
            rows: list[dict[str, object]] = []
            for server, job in _buried_on_each(servers, tube):
                rows.append(
                    {
                        "id": job.id,
                        "tube": job.tube,
                        "body": job.body,
                        **job.stats,
                        "source": server,
                        "exported_at": now,
                    }
                )
                exported.append((server, job.id))
                if len(rows) >= ROW_GROUP:
                    writer.write_table(pa.Table.from_pylist(rows, SCHEMA))
                    rows = []
                    if progress is not None:
                        progress(len(exported))
            if rows or not exported:
                writer.write_table(pa.Table.from_pylist(rows, SCHEMA))
        with open(tmp, "rb") as f:
            fsync(f.fileno())
        _install(tmp, path, overwrite)
        _fsync_dir(path.parent, fsync)
    finally:
        tmp.unlink(missing_ok=True)
    result = ExportResult(path, len(exported))
    if delete:
        for server in servers:
            _delete_exported(server, tube, [i for s, i in exported if s == server], result)
    return result


def _buried_on_each(servers: Sequence[str], tube: str) -> Iterator[tuple[str, BuriedJob]]:
    for server in servers:
        for job in iter_buried(server, tube):
            yield server, job


def _delete_exported(server: str, tube: str, ids: list[int], result: ExportResult) -> None:
    """Delete the exported jobs still buried in ``tube``; count the others as kept."""
    if not ids:
        return
    with Client.connect(server) as conn:
        for job_id in ids:
            stats = _stats_job(conn, job_id)
            still = stats is not None and (stats.get("state"), stats.get("tube")) == (
                "buried",
                tube,
            )
            if still and _delete(conn, job_id):
                result.deleted += 1
            else:
                result.not_deleted += 1


def _export_file(path: str | Path) -> pq.ParquetFile:
    try:
        table_file = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise ExportError(f"{path} is not an export-buried file: {exc}") from exc
    missing = sorted({"tube", "body", "priority", "ttr"} - set(table_file.schema_arrow.names))
    if missing:
        raise ExportError(f"{path} is not an export-buried file: no column(s) {', '.join(missing)}")
    return table_file


def requeue(
    path: str | Path,
    address: str,
    tube: str | None = None,
    *,
    delay: int = 0,
) -> int:
    """Put every job of an export file back (its body, priority and ttr; ``tube`` or the
    tube it came from). Returns the number of jobs put. At-least-once: if this fails part
    way, the error says how many were put; running it again puts those again. One
    server: the jobs of a file exported from several go back to the one named."""
    one_server(address, "requeue")
    table_file = _export_file(path)
    with Putter(address, tube or "default", partition=None, delay=delay) as put:
        for batch in table_file.iter_batches(columns=["tube", "body", "priority", "ttr"]):
            n = batch.num_rows
            put.put_batch(
                batch.column("body").to_pylist(),
                tubes=[tube] * n if tube else batch.column("tube").to_pylist(),
                priorities=batch.column("priority").to_pylist(),
                ttrs=batch.column("ttr").to_pylist(),
            )
        return put.finish().rows
