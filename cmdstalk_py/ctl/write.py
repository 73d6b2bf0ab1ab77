"""Single changes: ``put``, ``kick``, ``kick-job``, ``delete``, ``pause``.

Commands on a tube act on every ``--address``; commands on job ids need a single one (ids
are per server). Each says what it did; a job or tube that does not exist is exit 1 after
the others were done.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

import click

from cmdstalk_py.client.names import MAX_U32, validate_tube
from cmdstalk_py.ctl.beanstalk import Beanstalk
from cmdstalk_py.ctl.replies import Buried, NotFound, ServerFault
from cmdstalk_py.ctl.servers import NotFoundExit, Target, Unreachable
from cmdstalk_py.ctl.text import safe

U32 = click.IntRange(0, MAX_U32)


def tube_argument(name: str = "tube") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A TUBE argument checked against beanstalkd's name rule (usage error otherwise)."""

    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            return validate_tube(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None

    return click.argument(name, callback=check)


def _bodies(body: str | None, lines: IO[bytes] | None) -> Iterator[bytes]:
    if body is not None:
        yield body.encode("utf-8", "surrogateescape")
    elif lines is not None:
        for line in lines:
            line = line.rstrip(b"\r\n")
            if line:
                yield line
    else:
        yield sys.stdin.buffer.read()


@click.command()
@tube_argument()
@click.argument("body", required=False)
@click.option("--lines", "-l", "per_line", is_flag=True,
              help="One job per line of stdin (else all of stdin is one job).")  # fmt: skip
@click.option("--file", "-f", type=click.File("rb"), help="One job per line of FILE (- = stdin).")
@click.option("--priority", "-p", default=2**16, show_default=True, type=U32)
@click.option("--delay", "-d", default=0, show_default=True, type=U32, help="Seconds.")
@click.option("--ttr", "-t", default=60, show_default=True, type=click.IntRange(1, MAX_U32),
              help="Seconds a worker has for the job.")  # fmt: skip
@click.pass_obj
def put(target: Target, tube: str, body: str | None, per_line: bool, file: IO[bytes] | None,
        priority: int, delay: int, ttr: int) -> None:  # fmt: skip
    """Put jobs into TUBE and print each new job's id, one a line.

    The job is BODY; without it, all of stdin byte for byte (a trailing newline
    included) is one job. --lines makes one job of each line of stdin, --file one of
    each line of FILE: blank lines are skipped and each line's LF or CRLF is removed.

    With several --address, jobs go to the first server that can be reached. When a
    server fails midway, the ids printed are the jobs put; the later lines were not.
    """
    if body is not None and (file is not None or per_line):
        raise click.UsageError("give BODY, or --lines or --file, not both")
    with contextlib.ExitStack() as stack:
        address, client = _first_reachable(target, tube, stack)
        for data in _bodies(body, file or (sys.stdin.buffer if per_line else None)):
            try:
                job_id = client.put(data, priority=priority, delay=delay, ttr=ttr)
            except Buried as e:
                _echo_id(target, address, e.job_id)  # it exists: say so before stopping
                raise ServerFault(str(e)) from None
            _echo_id(target, address, job_id)


def _echo_id(target: Target, address: str, job_id: int) -> None:
    click.echo(f"{safe(address)} {job_id}" if len(target.addresses) > 1 else job_id)


def _first_reachable(
    target: Target, tube: str, stack: contextlib.ExitStack
) -> tuple[str, Beanstalk]:
    """The first ``--address`` that answers, using ``tube`` (connected within ``stack``)."""
    errors = []
    for address in target.addresses:
        try:
            return address, stack.enter_context(target.connect(address, use=tube))
        except Unreachable as e:
            errors.append(e.message)
    raise Unreachable("; ".join(errors))


@click.command()
@tube_argument()
@click.argument("bound", metavar="N", type=click.IntRange(1, MAX_U32))
@click.pass_obj
def kick(target: Target, tube: str, bound: int) -> None:
    """Kick up to N jobs of TUBE (buried ones, or delayed ones when none is buried)."""
    for address in target.addresses:
        with target.connect(address, use=tube) as client:
            kicked = client.kick(bound)
        click.echo(f"{safe(address)}: kicked {kicked} jobs in {tube}")


@click.command("kick-job")
@click.argument("job_ids", metavar="ID...", nargs=-1, required=True, type=click.IntRange(0))
@click.pass_obj
def kick_job(target: Target, job_ids: tuple[int, ...]) -> None:
    """Kick each job (buried or delayed) to ready; exit 1 if one could not be kicked."""
    _each_job(target, job_ids, "kicked", lambda client, job_id: client.kick_job(job_id))


@click.command()
@click.argument("job_ids", metavar="ID...", nargs=-1, required=True, type=click.IntRange(0))
@click.pass_obj
def delete(target: Target, job_ids: tuple[int, ...]) -> None:
    """Delete jobs (ready, delayed or buried; not one a worker holds); exit 1 if one
    was not found."""
    _each_job(target, job_ids, "deleted", lambda client, job_id: client.delete(job_id))


def _each_job(
    target: Target, job_ids: tuple[int, ...], done: str, act: Callable[[Beanstalk, int], None]
) -> None:
    missing = []
    with target.connect(target.single()) as client:
        for job_id in job_ids:
            try:
                act(client, job_id)
            except NotFound:
                missing.append(str(job_id))
                continue
            click.echo(f"{done} {job_id}")
    if missing:
        raise NotFoundExit(f"not found (or not in a state that allows it): {' '.join(missing)}")


@click.command()
@tube_argument()
@click.argument("seconds", type=U32)
@click.pass_obj
def pause(target: Target, tube: str, seconds: int) -> None:
    """Pause TUBE for SECONDS (0 resumes it) on every server; exit 1 where it does not
    exist."""
    missing = []
    for address in target.addresses:
        with target.connect(address) as client:
            try:
                client.pause_tube(tube, seconds)
            except NotFound:
                missing.append(address)
                continue
        click.echo(f"{safe(address)}: {tube} paused for {seconds}s")
    if missing:
        raise NotFoundExit(f"no tube {tube} on {', '.join(missing)}")


COMMANDS = [put, kick, kick_job, delete, pause]
