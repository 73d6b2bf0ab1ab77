"""What each command checks before Spark starts: a JVM is not worth starting for a typo.

Starting Spark costs seconds (tens on a busy machine), so whatever can be known without it
is checked first, on this machine: an input file or glob that matches nothing, the first
bytes of each CSV input (strict RFC 4180, the header has the body column), the schema of a
Parquet input, the report's event logs and output directory, the drain's ``--cwd`` and
event log. A failure is a ``PreflightError`` (one line; the command exits 1). The servers
are checked by ``servers.check_servers`` and ``drainwatch.wait_for_servers``, also before
Spark starts.

Only local paths are checked (``/data/x.csv``, ``file:/data/x.csv``): a URL of another
file system (``hdfs://``, ``s3a://``) and a glob this module does not expand as Hadoop
does (``{a,b}``, ``[^a]``, a backslash escape) are left to Spark. Each check reads a
bounded prefix of at most ``MAX_FILES`` files, never a whole file: Spark's own strict
check (``inputs``) still reads every byte before any job is put.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from cmdstalk_py.spark.inputs import csv_problem

#: Files whose first bytes are checked (the rest are left to Spark's check).
MAX_FILES = 32
#: Bytes read from the start of each checked file.
CHUNK_BYTES = 128 * 1024
# Glob syntax Hadoop has and Python's glob has not: such a path is left to Spark.
_HADOOP_ONLY = ("{", "[^", "\\")
_GLOB = ("*", "?", "[")


class PreflightError(ValueError):
    """A check before Spark failed; the message is the command's one error line."""


def local_path(path: str) -> str | None:
    """``path`` on this machine's file system, or None for another file system's URL."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    scheme, sep, _ = path.partition("://")
    if sep and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
        return None
    return path


def data_files(path: str, limit: int = MAX_FILES) -> list[Path] | None:
    """Up to ``limit`` files Spark would read for ``path`` (a file, a directory, a glob), in
    name order; None when ``path`` is not for this module to expand (see the module doc).
    PreflightError when it names nothing to read."""
    local = local_path(path)
    if local is None or any(token in local for token in _HADOOP_ONLY):
        return None
    if any(token in local for token in _GLOB):
        matches = sorted(glob.glob(local))
        if not matches:
            raise PreflightError(f"no file matches {path}")
    elif os.path.lexists(local):
        matches = [local]
    else:
        raise PreflightError(f"{path} does not exist")
    found: list[Path] = []
    for match in matches:
        found.extend(_leaves(Path(match), limit - len(found)))
        if len(found) >= limit:
            break
    if not found:
        raise PreflightError(f"{path} holds no data file (names starting with _ or . are skipped)")
    return found


def _leaves(path: Path, limit: int) -> Iterator[Path]:
    """Up to ``limit`` data files at ``path``: itself, or those under it as Spark lists them
    (recursively, through partition directories, leaving out hidden and ``_`` names)."""
    if limit <= 0:
        return
    if not path.is_dir():
        yield path
        return
    count = 0
    try:
        children = sorted(path.iterdir())
    except OSError as exc:
        raise PreflightError(f"cannot list {path}: {exc.strerror or exc}") from exc
    for child in children:
        if child.name.startswith(("_", ".")):
            continue
        for leaf in _leaves(child, limit - count):
            yield leaf
            count += 1
        if count >= limit:
            return


def _head(path: Path) -> tuple[bytes, bool]:
    """The first ``CHUNK_BYTES`` of ``path``, and whether that is the whole file."""
    try:
        with path.open("rb") as f:
            data = f.read(CHUNK_BYTES + 1)
    except OSError as exc:
        raise PreflightError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return data[:CHUNK_BYTES], len(data) <= CHUNK_BYTES


def check_input(path: str, fmt: str, body_column: str) -> None:
    """``enqueue``'s INPUT: it names a readable file, and its first files' first bytes are
    what ``fmt`` says (CSV: strict RFC 4180 with ``body_column`` in the header; Parquet:
    a Parquet file with that column). JSON lines are only opened (Spark reads what
    Python's json does not: single quotes, for one)."""
    files = data_files(path)
    if files is None:
        return
    if fmt == "csv":
        _check_csv(files, body_column)
    elif fmt == "parquet":
        _check_parquet(files, body_column)
    else:
        for file in files:
            _head(file)


def _check_csv(files: Sequence[Path], body_column: str) -> None:
    header: list[str] | None = None
    for file in files:
        data, complete = _head(file)
        problem = csv_problem(str(file), data, complete=complete)
        if problem:
            raise PreflightError(f"malformed CSV: {problem}")
        if header is None:
            header = csv_header(data)
            if header is not None and body_column not in header:
                raise PreflightError(f"no column {body_column!r} in {file}: {header}")


def csv_header(data: bytes) -> list[str] | None:
    """The header line's fields of CSV ``data`` (None when it has no complete line)."""
    import csv
    import io

    text = data.decode("utf-8-sig", errors="replace")
    for row in csv.reader(io.StringIO(text, newline="")):
        if row:
            return row
    return None


def _check_parquet(files: Sequence[Path], body_column: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for index, file in enumerate(files):
        try:
            names = pq.read_schema(file).names
        except (pa.ArrowException, OSError) as exc:
            raise PreflightError(f"cannot read {file} as parquet: {exc}") from exc
        if index == 0 and body_column not in names:
            raise PreflightError(f"no column {body_column!r} in {file}: {names}")


def check_events(paths: Sequence[str]) -> None:
    """``report``'s event logs: each path or glob names a readable file."""
    for path in paths:
        files = data_files(path, limit=1)
        if files is not None:
            _head(files[0])


def prepare_out(out: str, overwrite: bool) -> Path:
    """``report``'s output directory, made if missing; PreflightError when it exists with
    something in it and ``overwrite`` is false, or cannot be made."""
    target = Path(out).absolute()
    try:
        if target.is_dir() and any(target.iterdir()) and not overwrite:
            raise PreflightError(
                f"{target} exists and is not empty: choose another directory or pass --overwrite"
            )
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PreflightError(f"cannot use {target} for the report: {exc.strerror or exc}") from exc
    if not os.access(target, os.W_OK | os.X_OK):
        raise PreflightError(f"cannot write to {target}")
    return target


def check_drain_paths(cwd: str, events_path: str, local: bool) -> None:
    """``drain``'s event log can be appended to here; on a local master, ``--cwd`` is a
    directory (on a cluster it must exist on the workers, which only the tasks can see)."""
    if local and not os.path.isdir(cwd):
        raise PreflightError(f"--cwd {cwd} is not a directory")
    events = Path(events_path).absolute()
    if events.is_dir():
        raise PreflightError(f"--events {events} is a directory")
    parent = events.parent
    if not parent.is_dir():
        raise PreflightError(f"--events {events}: directory {parent} does not exist")
    writable = os.access(events, os.W_OK) if events.exists() else os.access(parent, os.W_OK)
    if not writable:
        raise PreflightError(f"--events {events}: permission denied")
