"""The read commands: ``stats``, ``tubes``, ``peek``, ``show`` (``top`` is in ``top``).

Each takes ``--json`` (one ASCII-only JSON value on stdout) and, with several
``--address``, shows every server: a column each (``stats``), a table each (``tubes``).
"""

from __future__ import annotations

import json
from typing import Any

import click

from cmdstalk_py.ctl import top
from cmdstalk_py.ctl.beanstalk import Beanstalk
from cmdstalk_py.ctl.replies import NotFound
from cmdstalk_py.ctl.servers import (
    TUBE_COLUMNS,
    NotFoundExit,
    Target,
    read_each,
    report_unreachable,
    tube_stats,
)
from cmdstalk_py.ctl.text import body_json, cut, echo_json, echo_lines, preview, safe, table
from cmdstalk_py.supervisor.jobcost import cost_parts

pass_target = click.make_pass_decorator(Target)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead.")

@click.command()
@json_option
@pass_target
def stats(target: Target, as_json: bool) -> None:
    """Server statistics: a column per server."""
    found, errors = read_each(target, lambda client: dict(client.stats()))
    if as_json:
        echo_json(found)
    elif found:
        keys = list(dict.fromkeys(k for s in found.values() for k in s))
        rows: list[list[object]] = [
            [key, *(found.get(a, {}).get(key, "-") for a in target.addresses)] for key in keys
        ]
        heads = [cut(a, 21) if a in found else f"{cut(a, 16)} DOWN" for a in target.addresses]
        echo_lines(table(["STAT", *heads], rows, flex=1))
    report_unreachable(errors)


@click.command()
@json_option
@pass_target
def tubes(target: Target, as_json: bool) -> None:
    """Every tube's jobs by state: a table per server."""
    found, errors = read_each(target, tube_stats)
    if as_json:
        echo_json(found)
    else:
        for n, (address, per_tube) in enumerate(found.items()):
            if len(target.addresses) > 1:
                click.echo(("\n" if n else "") + f"{safe(address)}:")
            rows: list[list[object]] = [
                [name, *(s.get(k, "-") for k in TUBE_COLUMNS)] for name, s in per_tube.items()
            ]
            echo_lines(table(["TUBE", *TUBE_COLUMNS.values()], rows))
    report_unreachable(errors)


def _job_summary(client: Beanstalk, job_id: int) -> dict[str, Any]:
    try:
        return dict(client.stats_job(job_id))
    except NotFound:
        return {}  # deleted between the peek and the stats-job


@click.command()
@click.argument("state", type=click.Choice(["ready", "delayed", "buried"]))
@click.argument("tube")
@click.option("--bytes", "limit", default=256, show_default=True, type=click.IntRange(0))
@json_option
@pass_target
def peek(target: Target, state: str, tube: str, limit: int, as_json: bool) -> None:
    """The next job in STATE in TUBE, on each server (exit 1 when there is none)."""

    def head(client: Beanstalk) -> dict[str, Any] | None:
        client.use(tube)
        try:
            job = getattr(client, f"peek_{state}")()
        except NotFound:
            return None
        return {"id": job.id, "stats": _job_summary(client, job.id), "body": job.body}

    found, errors = read_each(target, head)
    if as_json:
        echo_json({a: {**j, "body": body_json(j["body"])} for a, j in found.items()})
    for address, job in ({} if as_json else found).items():
        s = job["stats"]
        where = f"{address} " if len(target.addresses) > 1 else ""
        click.echo(
            safe(f"{where}job {job['id']}: pri {s.get('pri', '-')}, age {s.get('age', '-')}s, "
                 f"ttr {s.get('ttr', '-')}s, {len(job['body'])} bytes")
        )  # fmt: skip
        echo_lines(["  " + line for line in preview(job["body"], limit)])
    report_unreachable(errors)
    if not found:
        raise NotFoundExit(f"no {state} job in {tube}")


@click.command()
@click.argument("job_id", metavar="JOB", type=click.IntRange(0))
@click.option("--bytes", "limit", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--events", type=click.Path(dir_okay=False), help="Also the job's last outcome "
              "recorded in this event log (cmdstalk --events).")  # fmt: skip
@json_option
@pass_target
def show(target: Target, job_id: int, limit: int, events: str | None, as_json: bool) -> None:
    """A job's stats and a safe preview of its body (text, or hex when binary)."""
    address = target.single()
    with target.connect(address) as client:
        stats_, body = _stats_and_body(client, job_id)
    record = last_record(events, job_id, stats_.get("tube")) if events else None
    if as_json:
        echo_json({"id": job_id, "stats": stats_, "body": body_json(body) if body is not None
                   else None, "event": record})  # fmt: skip
    else:
        _print_job(job_id, stats_, body, limit, record, events)
    if not stats_ and record is None:
        raise NotFoundExit(f"job {job_id} not found on {address}")


def _stats_and_body(client: Beanstalk, job_id: int) -> tuple[dict[str, Any], bytes | None]:
    try:
        return dict(client.stats_job(job_id)), client.peek(job_id).body
    except NotFound:
        return {}, None


def _print_job(
    job_id: int,
    stats_: dict[str, Any],
    body: bytes | None,
    limit: int,
    record: dict[str, Any] | None,
    events: str | None,
) -> None:
    if stats_:
        click.echo(f"job {job_id}")
        echo_lines([f"  {safe(k)}: {safe(str(v))}" for k, v in stats_.items()])
    else:
        click.echo(f"job {job_id}: not on the server")
    if body is not None:
        click.echo(f"body ({len(body)} bytes):")
        echo_lines(["  " + line for line in preview(body, limit)])
    if events is None:
        return
    if record is None:
        click.echo(f"no outcome recorded in {safe(events)}")
        return
    click.echo(f"last outcome ({safe(str(record.get('end')))}): {safe(describe(record))}")
    tail = str(record.get("stderr_tail") or "").rstrip("\n").split("\n")[-10:]
    if any(tail):
        click.echo("stderr tail:")
        echo_lines(["  " + safe(line) for line in tail])


def describe(record: dict[str, Any]) -> str:
    """An event record's outcome in words: ``released (exit 3, 4 ms, 120 MiB peak, 1.52 s
    CPU, 3 processes, delay 1s)``, ``buried (killed by SIGTERM (memory), …)`` as the log
    line says it; what the record does not know (or holds as something other than a sound
    number) is left out."""
    how = []
    if record.get("exit_code") is not None:
        how.append(f"exit {record['exit_code']}")
    killed = record.get("killed")
    why = safe(killed) if isinstance(killed, str) and killed else None  # ttr, memory…
    if record.get("signal"):
        how.append(f"killed by {record['signal']}" + (f" ({why})" if why else ""))
    elif why:
        how.append(f"killed: {why}")  # it had exited when the kill came, or was never run
    if (duration := figure(record.get("duration_ms"))) is not None:
        how.append(f"{duration:.0f} ms")
    how += cost_parts(*job_cost(record))
    if record.get("release_delay") is not None:
        how.append(f"delay {record['release_delay']}s")
    if record.get("error"):
        how.append(str(record["error"]))
    return f"{record.get('outcome')} ({', '.join(how)})" if how else str(record.get("outcome"))


#: Above what any counter of ours holds (64-bit): a figure beyond it is not to be trusted.
FIGURE_LIMIT = 2**63


def figure(value: object) -> float | None:
    """A number read from an event record, when it is one a supervisor could have written:
    finite, not negative, below ``FIGURE_LIMIT``; else None (a string, ``NaN``, ``true``…)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if 0 <= value < FIGURE_LIMIT else None  # NaN fails every comparison


def job_cost(record: dict[str, Any]) -> tuple[float | None, float | None, int | None]:
    """``peak_memory_bytes``, ``cpu_s`` and ``procs`` of a job record, each None where not
    known: a record older than schema 4, a null, or a value ``figure`` does not trust."""
    procs = record.get("procs")
    whole = procs if isinstance(procs, int) and figure(procs) is not None else None
    return figure(record.get("peak_memory_bytes")), figure(record.get("cpu_s")), whole


def last_record(path: str, job_id: int, tube: str | None) -> dict[str, Any] | None:
    """The last record of ``job_id`` (in ``tube`` when known) in the event log at ``path``."""
    found = None
    try:
        with open(path, "rb") as f:
            for line in f:
                if b"%d" % job_id not in line:
                    continue  # most lines are other jobs': skip them unparsed
                record = parse_record(line)
                if record and record.get("job_id") == job_id and tube in (None, record["tube"]):
                    found = record
    except OSError as e:
        raise click.FileError(path, str(e)) from None
    return found


def parse_record(line: bytes) -> dict[str, Any] | None:
    """One event-log line as a record; None for a line that is not one (a torn write)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "job_id" in record else None


COMMANDS = [stats, tubes, top.top, peek, show]
