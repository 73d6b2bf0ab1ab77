"""``tail`` (the event log in readable lines, followed) and ``workers`` (what supervisors
are running, from their dashboards' ``/api/running``).

``tail`` shows job records, with what each job's tree cost where the record says
(``120 MiB peak, 1.52 s CPU, 3 processes``, schema 4), and the records of a pool's tube held
back by its limit or rate and servable again (``--held`` shows only these; ``--outcome``,
``--failed``, ``--min-memory`` and ``--min-cpu``, only jobs).

``tail`` follows the file the way ``tail -F`` does: when logrotate moves it away or
truncates it, the new file is read from its start.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from typing import IO, Any

import click

from cmdstalk_py.ctl.read import describe, figure, job_cost, parse_record
from cmdstalk_py.ctl.servers import EXIT_UNREACHABLE, Target
from cmdstalk_py.ctl.text import cut, echo_json, echo_lines, safe, table, width
from cmdstalk_py.ops.eventlog import TUBE_HELD, TUBE_SERVABLE
from cmdstalk_py.supervisor import numbers

POLL = 0.25  # seconds between looks at a followed file that has nothing new
OUTCOMES = ("deleted", "released", "buried", "timeout_buried", "precheck_buried",
            "shutdown_released", "lost")  # fmt: skip


def event_line(record: dict[str, Any]) -> str:
    """One record as one line that fits the terminal: when, where, what, stderr's last line."""
    if record.get("event") in TUBE_KINDS:
        return tube_line(record)
    stamp = str(record.get("end", ""))[11:23]  # HH:MM:SS.mmm of the ISO time
    where = f"{record.get('tube')}:{record.get('slot')}"
    line = f"{stamp} {where} job {record.get('job_id')} {describe(record)}"
    tail = str(record.get("stderr_tail") or "").rstrip("\n")
    if tail:
        line += f" | {tail.rsplit(chr(10), 1)[-1]}"
    return cut(safe(line), width())


#: The record kinds other than jobs ``tail`` shows (an event log may gain others later).
TUBE_KINDS = (TUBE_HELD, TUBE_SERVABLE)


def tube_line(record: dict[str, Any]) -> str:
    """``12:27:21.995 pool img: tube thumbs held back by its limit (2 running, limit 2)``."""
    stamp = str(record.get("time", ""))[11:23]
    what = (f"held back by its {record.get('reason')}" if record.get("event") == TUBE_HELD
            else "servable again")  # fmt: skip
    facts = [f"{record.get('running')} running"]
    if record.get("limit") is not None:
        facts.append(f"limit {record['limit']}")
    if (rate := figure(record.get("rate"))) is not None:
        facts.append(f"rate {rate:g}/s:{figure(record.get('burst')) or 1:g}")
    line = f"{stamp} pool {record.get('pool')}: tube {record.get('tube')} {what}"
    return cut(safe(f"{line} ({', '.join(facts)})"), width())


def costly(record: dict[str, Any], min_memory: int | None, min_cpu: float | None) -> bool:
    """A job record whose tree reached ``min_memory`` bytes at its peak and ``min_cpu``
    CPU seconds (each None: any); a figure the record does not know never reaches one."""
    memory, cpu, _ = job_cost(record)
    return (min_memory is None or (memory is not None and memory >= min_memory)) and (
        min_cpu is None or (cpu is not None and cpu >= min_cpu)
    )


def tail_record(line: bytes) -> dict[str, Any] | None:
    """A line ``tail`` shows: a job record, or a tube's held/servable record."""
    record = parse_record(line)
    if record is not None:
        return record
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value.get("event") in TUBE_KINDS else None


class Follower:
    """The lines of a file, and then those appended to it, across rotations."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self._partial = b""

    def _open(self) -> bool:
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - held across calls
        except FileNotFoundError:
            return False
        self._partial = b""
        return True

    def lines(self) -> list[bytes]:
        """The complete lines appended since the last call (reopening after a rotation)."""
        if self._file is None and not self._open():
            return []
        assert self._file is not None
        data = self._file.read()
        if not data and self._replaced():
            self._file.close()
            self._file = None
            return self.lines()
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        return chunks

    def _replaced(self) -> bool:
        assert self._file is not None
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return False  # moved away and not recreated yet: keep reading the old one
        mine = os.fstat(self._file.fileno())
        moved = (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev)
        return moved or now.st_size < self._file.tell()  # replaced, or truncated in place

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def records(follower: Follower, follow: bool) -> Iterator[dict[str, Any]]:
    while True:
        for line in follower.lines():
            record = tail_record(line)
            if record is not None:
                yield record
        if not follow:
            return
        time.sleep(POLL)  # a file offers no wake-up for appends: look again shortly


@click.command()
@click.argument("path", metavar="EVENTS", type=click.Path(dir_okay=False))
@click.option("--tube", "tubes", multiple=True, help="Only this tube (repeatable).")
@click.option("--outcome", "outcomes", multiple=True, type=click.Choice(OUTCOMES),
              help="Only this outcome (repeatable).")  # fmt: skip
@click.option("--failed", is_flag=True, help="Only jobs that did not end deleted.")
@click.option("--held", is_flag=True,
              help="Only a pool's tubes held back by their limit or rate, and servable again.")
@click.option("--min-memory", metavar="SIZE", type=numbers.Size(),
              help="Only jobs whose process tree's peak memory reached SIZE (512M, 2G).")
@click.option("--min-cpu", metavar="SECONDS", type=numbers.seconds(0.01, numbers.MAX_U32),
              help="Only jobs whose process tree used this much CPU (user + system).")
@click.option("--lines", "-n", "backlog", default=10, show_default=True, type=click.IntRange(0),
              help="Matching records already in the file to show first.")  # fmt: skip
@click.option("--follow/--no-follow", "-f/-F", default=True, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The records themselves, as JSON lines.")
def tail(path: str, tubes: tuple[str, ...], outcomes: tuple[str, ...], failed: bool,
         held: bool, min_memory: int | None, min_cpu: float | None, backlog: int,
         follow: bool, as_json: bool) -> None:  # fmt: skip
    """Follow a cmdstalk event log (--events PATH) in readable lines."""
    jobs_only = bool(outcomes or failed) or min_memory is not None or min_cpu is not None

    def wanted(r: dict[str, Any]) -> bool:
        if "event" in r:  # a tube's record: only the tube filter applies to it
            return not jobs_only and (not tubes or r.get("tube") in tubes)
        return (not held and (not tubes or r.get("tube") in tubes)
                and (not outcomes or r.get("outcome") in outcomes)
                and not (failed and r.get("outcome") == "deleted")
                and costly(r, min_memory, min_cpu))  # fmt: skip

    def show(r: dict[str, Any]) -> None:
        echo_json(r) if as_json else click.echo(event_line(r))

    follower = Follower(path)
    if not follow and not os.path.exists(path):
        raise click.FileError(path, "no such file")
    try:
        earlier = deque((r for r in records(follower, False) if wanted(r)), maxlen=backlog)
        for record in earlier:
            show(record)
        if follow:
            for record in records(follower, True):
                if wanted(record):
                    show(record)
    except KeyboardInterrupt:
        pass
    finally:
        follower.close()


#: Largest /api/running reply read (a dashboard lists at most a few thousand jobs).
RUNNING_LIMIT = 16 * 2**20


def fetch_running(url: str, timeout: float) -> list[dict[str, Any]]:
    """A supervisor dashboard's running jobs (``URL/api/running``), read within
    ``RUNNING_LIMIT`` bytes and about ``timeout`` seconds for the whole reply; ValueError
    for a reply that is not a list of objects."""
    deadline = time.monotonic() + timeout
    data = bytearray()
    with urllib.request.urlopen(url.rstrip("/") + "/api/running", timeout=timeout) as reply:
        while chunk := reply.read1(65536):  # each read waits at most ``timeout``
            data += chunk
            if len(data) > RUNNING_LIMIT:
                raise ValueError(f"reply over {RUNNING_LIMIT} bytes")
            if time.monotonic() > deadline:
                raise ValueError(f"timed out: no whole reply within {timeout:g}s (--timeout)")
    try:
        value = json.loads(data)
    except RecursionError:  # nested deeper than a reply of ours ever is
        raise ValueError("not a list of running jobs") from None
    if not isinstance(value, list) or not all(isinstance(j, dict) for j in value):
        raise ValueError("not a list of running jobs")
    return value


def _seconds(value: object) -> str:
    return f"{value:.1f}s" if isinstance(value, int | float) else "-"


def _mib(value: object) -> str:
    """A running job's tree memory, as the log line words it (``-`` unknown or unsound)."""
    memory = figure(value)
    return "-" if memory is None else f"{memory / (1 << 20):.0f} MiB"


def _cpu(value: object) -> str:
    cpu = figure(value)
    return "-" if cpu is None else f"{cpu:.2f}s"


def _last_line(output: object) -> object:
    return output[-1] if isinstance(output, list) and output else ""


@click.command()
@click.option("--from", "urls", multiple=True, required=True, metavar="URL",
              help="A supervisor's dashboard (cmdstalk --http), e.g. http://host:8080; "
                   "repeatable or comma-separated.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead.")
@click.pass_obj
def workers(target: Target, urls: tuple[str, ...], as_json: bool) -> None:
    """The jobs running now on one or more supervisors, with what each one's process tree
    uses now (memory, CPU seconds so far)."""
    urls = tuple(u.strip() for text in urls for u in text.split(",") if u.strip())
    found: dict[str, list[dict[str, Any]]] = {}
    errors = []
    for url in urls:
        try:
            found[url] = fetch_running(url, target.timeout)
        except (OSError, ValueError, urllib.error.URLError) as e:
            errors.append(f"cannot read {url}: {e}")
    if as_json:
        echo_json(found)
    else:
        several = len(urls) > 1
        heads = [*(["FROM"] if several else []), "POOL", "TUBE", "SLOT", "JOB", "PID",
                 "ELAPSED", "TTR", "MEM", "CPU", "LAST OUTPUT"]  # fmt: skip
        rows: list[list[object]] = [
            [*([url] if several else []), j.get("pool") or "-", j.get("tube"), j.get("slot"),
             j.get("job_id"), j.get("pid") or "-", _seconds(j.get("elapsed")), j.get("ttr"),
             _mib(j.get("memory_bytes")), _cpu(j.get("cpu_s")), _last_line(j.get("output"))]
            for url, jobs in found.items() for j in jobs
        ]  # fmt: skip
        echo_lines(table(heads, rows, flex=len(heads) - 1))
    for error in errors:
        click.echo(f"Error: {safe(error)}", err=True)
    if errors:
        raise SystemExit(EXIT_UNREACHABLE)


COMMANDS = [tail, workers]
