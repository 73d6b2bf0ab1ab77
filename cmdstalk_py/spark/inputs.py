"""Reading ``enqueue``'s input: Parquet, JSON lines or standard CSV, as the job columns.

CSV is read as RFC 4180 describes it and as pandas, Python's ``csv`` module and spreadsheets
write it: fields in double quotes may hold commas and line breaks, and a double quote inside
is written twice (Spark's default escape is a backslash, which cuts such a body at its
first comma). A malformed file (an unterminated quote, a row with more fields than the
header, bytes that are not UTF-8) fails before any job is put: each file is first checked
with Python's ``csv`` module in strict mode, because a parse error in the middle of the
write would leave the rows before it enqueued.
"""

from __future__ import annotations

import codecs
import csv
import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Spark's CSV options for RFC 4180 input with a header line.
CSV_OPTIONS = {
    "header": "true",
    "quote": '"',
    "escape": '"',
    "multiLine": "true",
    "mode": "FAILFAST",
}


class InputError(ValueError):
    """The input cannot become jobs: missing, malformed, or without the body column."""


def read_jobs(spark: SparkSession, path: str, fmt: str, body_column: str) -> DataFrame:
    """The input as ``body`` plus the override columns it has (CSV overrides cast to
    integers); ``InputError`` when it cannot be read or is malformed."""
    # Imported here: ``preflight`` uses ``csv_problem`` before Spark starts, and the data
    # source module imports pyspark.
    from cmdstalk_py.spark.datasource import OVERRIDES
    from cmdstalk_py.spark.errors import cause_line

    reader = spark.read
    if fmt == "csv":
        reader = reader.options(**CSV_OPTIONS)
    try:
        df = reader.format(fmt).load(path)
    except Exception as exc:
        raise InputError(f"cannot read {path} as {fmt}: {cause_line(exc)}") from exc
    if body_column not in df.columns:
        raise InputError(f"no column {body_column!r} in {path}: {df.columns}")
    cols = [df[body_column].alias("body")]
    for name in (c for c in df.columns if c in OVERRIDES and c != body_column):
        # CSV columns arrive as strings; the numeric overrides must be integers.
        numeric = fmt == "csv" and name != "tube"
        cols.append(df[name].cast("long").alias(name) if numeric else df[name])
    if fmt == "csv":
        _check_parses(spark, path)
    return df.select(*cols)


def _check_parses(spark: SparkSession, path: str) -> None:
    from cmdstalk_py.spark.errors import cause_line

    # Spark's reader has no strict mode (a quote left open swallows the rest of a one-column
    # file): every file is checked with Python's csv module, the reference its writers follow.
    try:
        files = spark.read.format("binaryFile").load(path).select("path", "content")
        problems = files.rdd.map(lambda r: csv_problem(r[0], bytes(r[1]))).filter(bool).take(1)
    except Exception as exc:
        raise InputError(f"cannot read {path}: {cause_line(exc)}") from exc
    if problems:
        raise InputError(f"malformed CSV: {problems[0]}")


def csv_problem(name: str, data: bytes, complete: bool = True) -> str:
    """What makes ``data`` not RFC 4180 CSV with a header line ('' when nothing does).

    ``complete`` false: ``data`` is the start of a longer file, so its last line may be cut
    short (in a multi-byte character, a row, or a quoted field): that line is not judged,
    nor a quote still open at the end (it may close past the part read)."""
    try:
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(data, final=complete)
    except UnicodeDecodeError as exc:
        return f"{name}: not UTF-8 ({exc})"
    if not complete:
        text = text[: text.rfind("\n") + 1]
    lines = _Lines(text)
    reader = csv.reader(lines, strict=True)
    width = None
    try:
        for row in reader:
            if not row:
                continue  # a blank line: Spark skips it too
            if width is None:
                width = len(row)
            elif len(row) != width:
                return (
                    f"{name} line {reader.line_num}: {len(row)} fields where the header has {width}"
                )
    except csv.Error as exc:
        if not complete and lines.ended:
            return ""  # a quoted field that goes on past the part read
        return f"{name} line {reader.line_num}: {exc}"
    return ""


class _Lines:
    """The lines of ``text`` for ``csv.reader``, knowing whether they have run out."""

    def __init__(self, text: str) -> None:
        self._lines = iter(io.StringIO(text, newline=""))
        self.ended = False

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        try:
            return next(self._lines)
        except StopIteration:
            self.ended = True
            raise
