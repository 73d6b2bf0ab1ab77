"""``clear`` and ``move``: every job of one state in a tube, while others keep working.

Other clients put, reserve and kick meanwhile, so a sweep must touch only jobs that were in
the chosen state: it counts them first (``stats-tube``) and handles at most that many,
and it learns the newest job id at that moment (ids are server-wide and increase: a probe
job put into and deleted from a private tube). For each, it peeks the state's next job,
stops at one newer than the probe (a job put meanwhile, or buried since, that sorts ahead:
the older ones behind it are left for another run, and said so), checks its state with
``stats-job``, and takes it with ``reserve-job`` before acting. A held job is ours
alone: nobody can run, kick or delete it while we copy it. A job a worker reserved or
someone deleted in between is skipped. ``move`` puts a copy (same body, priority, TTR; a
delayed job keeps its time left) into the target tube and deletes the original only once
the put succeeded; if the put fails, the original goes back to its state.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from cmdstalk_py.client.names import MAX_U32
from cmdstalk_py.ctl.beanstalk import Beanstalk, Job
from cmdstalk_py.ctl.replies import Buried, NotFound
from cmdstalk_py.ctl.servers import Target
from cmdstalk_py.ctl.text import safe
from cmdstalk_py.ctl.write import tube_argument

STATES = ("ready", "delayed", "buried")
state_option = click.option("--state", "-s", required=True, type=click.Choice(STATES),
                            help="Which jobs: only those in this state.")  # fmt: skip
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")

Act = Callable[[Job, dict[str, Any]], None]


def count(client: Beanstalk, tube: str, state: str) -> int:
    """Jobs in ``state`` in ``tube`` now (0 when the tube does not exist)."""
    try:
        return int(client.stats_tube(tube)[f"current-jobs-{state}"])
    except NotFound:
        return 0


def confirm(question: str, yes: bool) -> None:
    """Ask on a terminal; without one, only ``--yes`` goes ahead (usage error otherwise)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{question} Add --yes to confirm without a terminal.")
    click.confirm(question, abort=True)


def newest_id(client: Beanstalk, tube: str) -> int:
    """The id of a job put now: every job with a smaller id existed before this call."""
    client.use(f"cmdstalk-ctl-probe.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        # delayed for as long as can be: nobody could run it
        probe = client.put(b"", priority=MAX_U32, delay=MAX_U32, ttr=1)
        client.delete(probe)
    finally:
        client.use(tube)
    return probe


@dataclass
class Swept:
    """What a sweep did: jobs acted on, taken by others meanwhile, left behind newer ones."""

    done: int = 0
    skipped: int = 0
    stopped: bool = False

    def say(self, what: str) -> str:
        """``what`` ("deleted 3 buried jobs from mail") and the exceptions, in words."""
        if self.skipped:
            what += f"; {self.skipped} taken by others meanwhile"
        if self.stopped:
            what += "; stopped at jobs newer than the command: run it again for the rest"
        return what


def sweep(client: Beanstalk, tube: str, state: str, limit: int, act: Act, label: str) -> Swept:
    """Apply ``act`` to at most ``limit`` jobs found in ``state`` in ``tube`` (see the
    module doc). ``client`` uses ``tube``."""
    swept = Swept()
    newest = newest_id(client, tube) if limit else 0
    peek = getattr(client, f"peek_{state}")
    # A bar only on a terminal, and only for a sweep long enough to watch.
    hidden = limit < 100 or not sys.stderr.isatty()
    with click.progressbar(length=limit, label=label, file=sys.stderr, hidden=hidden) as bar:
        for _ in range(limit):
            try:
                job = peek()
            except NotFound:
                break  # the state emptied faster than we did: others took the rest
            if job.id > newest:
                swept.stopped = True
                break
            try:
                stats = dict(client.stats_job(job.id))
                if stats["state"] != state:
                    raise NotFound()
                held = client.reserve_job(job.id)
            except NotFound:
                swept.skipped += 1
                continue
            act(held, stats)
            swept.done += 1
            bar.update(1)
    return swept


def give_back(client: Beanstalk, job: Job, stats: dict[str, Any]) -> None:
    """Return a job we hold to the state it was taken from."""
    if stats["state"] == "buried":
        client.bury(job.id, stats["pri"])
    else:
        delay = stats["time-left"] if stats["state"] == "delayed" else 0
        client.release(job.id, stats["pri"], delay)


@click.command()
@tube_argument()
@state_option
@yes_option
@click.pass_obj
def clear(target: Target, tube: str, state: str, yes: bool) -> None:
    """Delete the jobs in one state of TUBE, on every server."""
    for address in target.addresses:
        with target.connect(address, use=tube) as client:
            limit = count(client, tube, state)
            if limit:
                confirm(f"Delete {limit} {state} jobs from {tube} on {address}?", yes)
            swept = sweep(client, tube, state, limit, lambda job, _: client.delete(job.id),
                          "deleting")  # fmt: skip
        click.echo(safe(swept.say(f"{address}: deleted {swept.done} {state} jobs from {tube}")))


@click.command()
@tube_argument("source")
@tube_argument("destination")
@state_option
@yes_option
@click.pass_obj
def move(target: Target, source: str, destination: str, state: str, yes: bool) -> None:
    """Move the jobs in one state of SOURCE to DESTINATION (as ready jobs; delayed ones
    keep their time left), on every server."""
    if source == destination:
        raise click.UsageError("SOURCE and DESTINATION are the same tube")
    for address in target.addresses:
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(target.connect(address, use=source))
            into = stack.enter_context(target.connect(address, use=destination))
            limit = count(client, source, state)
            if limit:
                confirm(f"Move {limit} {state} jobs from {source} to {destination} on "
                        f"{address}?", yes)  # fmt: skip
            act = _mover(client, into)
            swept = sweep(client, source, state, limit, act, "moving")
        click.echo(safe(swept.say(
            f"{address}: moved {swept.done} {state} jobs from {source} to {destination}")))


def _mover(client: Beanstalk, into: Beanstalk) -> Act:
    def act(job: Job, stats: dict[str, Any]) -> None:
        delay = stats["time-left"] if stats["state"] == "delayed" else 0
        try:
            into.put(job.body, priority=stats["pri"], delay=delay, ttr=stats["ttr"])
        except Buried:
            pass  # the copy is in, buried (the server is out of memory): still a copy
        except BaseException:
            with contextlib.suppress(Exception):
                give_back(client, job, stats)
            raise
        client.delete(job.id)  # only now: the copy is in

    return act


COMMANDS = [clear, move]
