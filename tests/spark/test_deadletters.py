"""export-buried / requeue against real servers: nothing lost, nothing made runnable."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import greenstalk
import pytest
from click.testing import CliRunner

# Without the spark extra the module skips instead of failing the whole collection.
pq = pytest.importorskip("pyarrow.parquet", reason="the spark extra is not installed")

from cmdstalk_py.spark.cli import main  # noqa: E402
from cmdstalk_py.spark.deadletters import export_buried, requeue  # noqa: E402
from tests.helpers import BeanstalkServer  # noqa: E402


def binary_client(
    server: BeanstalkServer, use: str = "default", watch: str = "default"
) -> greenstalk.Client[bytes]:
    """A greenstalk client that leaves bodies as bytes (bodies here are not UTF-8)."""
    return greenstalk.Client((server.host, server.port), encoding=None, use=use, watch=watch)


def bury_jobs(server: BeanstalkServer, tube: str, n: int) -> dict[int, tuple[bytes, int, int]]:
    """Put and bury ``n`` jobs in ``tube``; {id: (body, priority, ttr)} in bury order."""
    with closing(binary_client(server, use=tube, watch=tube)) as client:
        return _bury(client, n)


def _bury(client: greenstalk.Client[bytes], n: int) -> dict[int, tuple[bytes, int, int]]:
    jobs: dict[int, tuple[bytes, int, int]] = {}
    for i in range(n):
        body = b"dead-%d\r\n\x00\xff" % i
        client.put(body, priority=5, ttr=30 + i % 5)
        job = client.reserve(timeout=5)
        assert job.body == body
        client.bury(job, priority=100 + i)
        jobs[job.id] = (body, 100 + i, 30 + i % 5)
    return jobs


def tube_counts(server: BeanstalkServer, tube: str) -> tuple[int, int, int]:
    """(buried, ready, reserved) in ``tube``; a tube with no jobs and no users is gone."""
    try:
        stats = server.client().stats_tube(tube)
    except greenstalk.NotFoundError:
        return (0, 0, 0)
    return (
        int(stats["current-jobs-buried"]),
        int(stats["current-jobs-ready"]),
        int(stats["current-jobs-reserved"]),
    )


def test_export_keeps_jobs_buried_and_in_order(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    buried = bury_jobs(beanstalk, "dead", 300)
    ready = beanstalk.client(use="dead")
    for i in range(5):
        ready.put(b"ready-%d" % i)
    bury_jobs(beanstalk, "other", 1)

    result = export_buried(beanstalk.address, "dead", tmp_path / "dead.parquet")
    assert result.jobs == 300 and result.deleted == 0
    table = pq.read_table(tmp_path / "dead.parquet").to_pylist()
    assert [row["id"] for row in table] == list(buried)  # the buried list's order
    for row in table:
        body, priority, ttr = buried[row["id"]]
        assert (row["body"], row["priority"], row["ttr"], row["tube"]) == (
            body,
            priority,
            ttr,
            "dead",
        )
        assert (row["reserves"], row["buries"], row["kicks"]) == (1, 1, 0)  # from before
    # Nothing became runnable; the list is back in its original order.
    assert tube_counts(beanstalk, "dead") == (300, 5, 0)
    assert tube_counts(beanstalk, "other") == (1, 0, 0)
    with closing(binary_client(beanstalk, use="dead")) as client:
        assert client.peek_buried().id == next(iter(buried))
        after = client.stats_job(next(iter(buried)))
    assert (after["state"], after["reserves"], after["buries"]) == ("buried", 2, 2)


def test_delete_waits_for_the_durable_file_and_requeue_restores(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    buried = bury_jobs(beanstalk, "dead", 120)
    out = tmp_path / "dead.parquet"
    seen_at_fsync: list[tuple[int, int, int]] = []

    def fsync(fd: int) -> None:
        seen_at_fsync.append(tube_counts(beanstalk, "dead"))

    result = export_buried(beanstalk.address, "dead", out, delete=True, fsync=fsync)
    assert (result.jobs, result.deleted, result.not_deleted) == (120, 120, 0)
    assert seen_at_fsync == [(120, 0, 0), (120, 0, 0)]  # file, then directory: all still there
    assert tube_counts(beanstalk, "dead") == (0, 0, 0)
    assert not list(tmp_path.glob(".*tmp"))

    assert requeue(out, beanstalk.address, "again") == 120
    got = {}
    with closing(binary_client(beanstalk, watch="again")) as client:
        for _ in range(120):
            job = client.reserve(timeout=5)
            stats = client.stats_job(job)
            got[job.body] = (stats["pri"], stats["ttr"], stats["tube"])
            client.delete(job)
    assert got == {body: (pri, ttr, "again") for body, pri, ttr in buried.values()}


def test_cli_round_trip_to_original_tube(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    buried = bury_jobs(beanstalk, "jobs/failed", 7)
    out = tmp_path / "x.parquet"
    runner = CliRunner()
    run = runner.invoke(
        main,
        [
            "export-buried",
            "--address",
            beanstalk.address,
            "--tube",
            "jobs/failed",
            "--out",
            str(out),
            "--delete",
        ],
    )
    assert run.exit_code == 0, run.output
    assert "exported 7 buried jobs" in run.output and "deleted 7" in run.output
    run = runner.invoke(main, ["requeue", str(out), "--address", beanstalk.address])
    assert run.exit_code == 0, run.output
    assert "requeued 7 jobs" in run.output
    assert tube_counts(beanstalk, "jobs/failed") == (0, 7, 0)
    with closing(binary_client(beanstalk, watch="jobs/failed")) as client:
        bodies = sorted(client.reserve(timeout=5).body for _ in range(7))
    assert bodies == sorted(b for b, _, _ in buried.values())


def test_empty_tube_gives_an_empty_file(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    result = export_buried(beanstalk.address, "nothing", tmp_path / "e.parquet", delete=True)
    assert (result.jobs, result.deleted) == (0, 0)
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.num_rows == 0 and "body" in table.column_names


def test_export_failure_is_reported_and_leaves_no_file(tmp_path: Path) -> None:
    from tests.helpers import free_port

    run = CliRunner().invoke(
        main,
        [
            "export-buried",
            "--address",
            f"127.0.0.1:{free_port()}",
            "--tube",
            "t",
            "--out",
            str(tmp_path / "f.parquet"),
            "--delete",
        ],
    )
    assert run.exit_code == 1 and "export failed, nothing deleted" in run.output
    assert list(tmp_path.iterdir()) == []


def test_export_never_overwrites_yesterdays_dead_letters(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    out = tmp_path / "dead.parquet"
    bury_jobs(beanstalk, "dlq", 3)
    args = ["export-buried", "--address", beanstalk.address, "--tube", "dlq", "--out", str(out)]
    first = CliRunner().invoke(main, [*args, "--delete"])
    assert first.exit_code == 0, first.output
    assert (out.stat().st_mode & 0o777) == 0o600
    yesterday = out.read_bytes()
    bury_jobs(beanstalk, "dlq", 1)
    again = CliRunner().invoke(main, [*args, "--delete"])  # the same command, a day later
    assert again.exit_code == 1 and "exists" in again.output and "--overwrite" in again.output
    assert out.read_bytes() == yesterday and tube_counts(beanstalk, "dlq") == (1, 0, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dead.parquet"]
    forced = CliRunner().invoke(main, [*args, "--overwrite"])
    assert forced.exit_code == 0, forced.output
    assert pq.read_table(out).num_rows == 1
