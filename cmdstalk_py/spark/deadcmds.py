"""``cmdstalk-spark export-buried`` and ``requeue``: dead letters out of beanstalkd into a
Parquet file, and back (``deadletters`` does the work; this module is their command line)."""

from __future__ import annotations

import click

from cmdstalk_py.client.names import DEFAULT_ADDRESS


@click.command("export-buried")
@click.option(
    "--address",
    default=DEFAULT_ADDRESS,
    show_default=True,
    envvar="CMDSTALK_ADDRESS",
    show_envvar=True,
    help="beanstalkd host:port; several separated by commas: each one's buried jobs.",
)
@click.option("--tube", required=True)
@click.option(
    "--out", required=True, type=click.Path(dir_okay=False), help="Parquet file to write."
)
@click.option("--delete", is_flag=True, help="Delete the jobs once the file is safely on disk.")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists (refused otherwise).")
def export_buried_cmd(address: str, tube: str, out: str, delete: bool, overwrite: bool) -> None:
    """Copy every buried job of TUBE (body, id, priority, stats) to a Parquet file.

    Jobs stay buried throughout (see the README on how the buried list is walked); with
    --delete they are deleted only after the file is written, fsynced and in place. An
    existing OUT is never replaced without --overwrite.
    """
    from cmdstalk_py.client.errors import BeanstalkdError
    from cmdstalk_py.spark.deadletters import ExportError, export_buried
    from cmdstalk_py.spark.servers import parse_servers

    try:
        servers = parse_servers(address)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc

    def progress(n: int) -> None:
        click.echo(f"  {n} jobs exported...", err=True)

    try:
        result = export_buried(
            servers, tube, out, delete=delete, overwrite=overwrite, progress=progress
        )
    except (ExportError, BeanstalkdError, OSError) as exc:
        raise click.ClickException(f"export failed, nothing deleted: {exc}") from exc
    where = f" from {', '.join(servers)}" if len(servers) > 1 else ""
    click.echo(f"exported {result.jobs} buried jobs of tube {tube!r}{where} to {result.path}")
    if delete:
        click.echo(
            f"deleted {result.deleted}; {result.not_deleted} were no longer buried and were kept"
        )


@click.command("requeue")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--tube", help="Put every job into this tube (default: the tube it came from).")
@click.option(
    "--address",
    default=DEFAULT_ADDRESS,
    show_default=True,
    envvar="CMDSTALK_ADDRESS",
    show_envvar=True,
    help="beanstalkd host:port (one).",
)
@click.option("--delay", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1))
def requeue_cmd(path: str, tube: str | None, address: str, delay: int) -> None:
    """Put the jobs of an export-buried file back into beanstalkd (body, priority, ttr)."""
    from cmdstalk_py.spark.deadletters import ExportError, requeue
    from cmdstalk_py.spark.putter import PutFailed
    from cmdstalk_py.spark.servers import one_server

    try:
        address = one_server(address, "requeue")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc

    try:
        n = requeue(path, address, tube, delay=delay)
    except (PutFailed, ExportError, ValueError) as exc:
        raise click.ClickException(f"requeue failed: {exc}") from exc
    click.echo(f"requeued {n} jobs from {path} to {address}")
