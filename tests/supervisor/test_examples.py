"""The quick start: examples/demo.py, examples/produce.py and ``cmdstalk --embedded``."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import greenstalk

from tests.helpers import BeanstalkServer, accepts_connections, free_port, wait_until
from tests.supervisor.conftest import REPO, cmdstalk_env, read_events, start_cmdstalk


def test_demo_runs_every_example_to_its_end() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env=cmdstalk_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every job ended as expected" in proc.stdout
    table = proc.stdout
    for worker, outcome in [
        ("hello.sh", "deleted"),
        ("flaky.py", "released"),
        ("flaky.py", "deleted"),
        ("json_worker.py", "buried"),
        ("slow.sh", "timeout_buried"),
    ]:
        assert any(worker in line and outcome in line.split() for line in table.splitlines())


def test_produce_puts_one_job_per_payload(beanstalk: BeanstalkServer) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "produce.py"), "--address", beanstalk.address,
         "--tube", "prod", "--priority", "7", "--ttr", "9", "a", "b", "--stdin-lines"],
        input="c\n\nd\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    ids = [int(x) for x in proc.stdout.split()]
    worker = beanstalk.client(watch="prod")
    bodies = []
    for job_id in ids:
        job = worker.reserve(timeout=5)
        assert job.id == job_id
        stats = worker.stats_job(job)
        assert (stats["pri"], stats["ttr"]) == (7, 9)
        bodies.append(job.body)
        worker.delete(job)
    assert bodies == ["a", "b", "c", "d"]


def test_embedded_server_with_max_jobs(tmp_path: Path) -> None:
    port = free_port()
    events = tmp_path / "events.jsonl"
    proc = start_cmdstalk(
        "--embedded", f"-address=127.0.0.1:{port}", "-tubes=emb", "-cmd=tr a-z A-Z",
        "--max-jobs", "2", "--events", str(events),
    )
    try:
        wait_until(lambda: accepts_connections("127.0.0.1", port), 15, message="embedded server")
        with greenstalk.Client(("127.0.0.1", port), use="emb") as producer:
            ids = [producer.put(body) for body in ("one", "two")]
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    records = read_events(events)
    assert [(r["job_id"], r["outcome"], r["stdout_tail"]) for r in records] == [
        (ids[0], "deleted", "ONE"),
        (ids[1], "deleted", "TWO"),
    ]


def test_embedded_port_in_use_is_one_error_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = start_cmdstalk("--embedded", "--address", f"127.0.0.1:{port}", "--cmd", "cat")
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    lines = err.decode().splitlines()
    assert [line for line in lines if line.startswith("Error:")] == [
        next(line for line in lines if "cannot start the embedded server" in line)
    ]
    assert "Traceback" not in err.decode()


def test_embedded_binlog_keeps_jobs_across_restarts(tmp_path: Path) -> None:
    """`cmdstalk --embedded --binlog DIR`: jobs the first run buried are there for the next."""
    binlog = tmp_path / "binlog"
    port = free_port()
    args = ("--embedded", f"--address=127.0.0.1:{port}", "--binlog", str(binlog),
            "--binlog-fsync", "0")  # fmt: skip
    first = start_cmdstalk(*args, "--tubes", "keep", "--cmd", "exit 3", "--bury-exit-codes", "3")
    try:
        wait_until(lambda: accepts_connections("127.0.0.1", port), 15, message="embedded server")
        with greenstalk.Client(("127.0.0.1", port), use="keep") as producer:
            ids = [producer.put(body, priority=7) for body in ("alpha", "beta")]
            wait_until(
                lambda: producer.stats_tube("keep")["current-jobs-buried"] == 2,
                20,
                message="both jobs buried",
            )
        # A second server on the same binlog directory is refused, clearly.
        second = start_cmdstalk(*args[:1], f"--address=127.0.0.1:{free_port()}", *args[2:],
                                "--cmd", "cat")  # fmt: skip
        _, err = second.communicate(timeout=20)
        assert second.returncode == 1
        assert "cannot start the embedded server" in err.decode()
        assert str(binlog) in err.decode() and "Traceback" not in err.decode()
        first.terminate()
        assert first.wait(timeout=20) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # Restart on the same directory, serving another tube: the buried jobs are still there.
    again = start_cmdstalk(*args, "--tubes", "other", "--cmd", "cat")
    try:
        wait_until(lambda: accepts_connections("127.0.0.1", port), 15, message="restarted server")
        with greenstalk.Client(("127.0.0.1", port), use="keep") as client:
            found = [client.peek(i) for i in ids]
            assert [job.body for job in found] == ["alpha", "beta"]
            assert [client.stats_job(i)["state"] for i in ids] == ["buried", "buried"]
            assert [client.stats_job(i)["pri"] for i in ids] == [7, 7]
            assert client.put("gamma") > max(ids)  # ids never repeat
    finally:
        again.terminate()
        again.wait(timeout=20)


def test_binlog_needs_embedded() -> None:
    proc = start_cmdstalk("--binlog", "/tmp/nowhere", "--cmd", "cat")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert [line for line in err.decode().splitlines() if line.startswith("Error:")] == [
        "Error: Invalid value for --binlog: only the --embedded server has a binlog; "
        "give --embedded too"
    ]


def _demo_command() -> str:
    """The ``--cmd`` the quick start (examples/demo.py, README) runs jobs with."""
    spec = importlib.util.spec_from_file_location("demo", REPO / "examples" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    command: str = demo.CMD
    return command


def test_no_tube_name_or_payload_chooses_what_the_examples_run(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    """A producer owns the tube name and the payload: neither may pick the program."""
    traversal, substituted = tmp_path / "traversal", tmp_path / "substituted"
    hostile = {
        # The README's old pattern (exec examples/workers/"$CMDSTALK_TUBE") ran this as
        # Python, with the payload as its script.
        "../../../../usr/bin/python3": f"open({str(traversal)!r}, 'w').write('ran')",
        # The same from any depth: above / is still /.
        "../" * 16 + "usr/bin/python3": f"open({str(traversal)!r}, 'w').write('ran')",
        f"$(touch$IFS{substituted})": "x",
    }
    producer = beanstalk.client()
    ids = {}
    for tube, payload in [("hello.sh", "Alice"), *hostile.items()]:
        producer.use(tube)
        ids[producer.put(payload)] = tube
    events = tmp_path / "events.jsonl"
    proc = start_cmdstalk(
        "--address", beanstalk.address, "--all", "--discover-interval", "0.1",
        "--bury-exit-codes", "65,78", "--cmd", _demo_command(), "--events", str(events),
        cwd=str(tmp_path), stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: len(read_events(events)) >= 4, 20, message="four job results")
    finally:
        proc.terminate()
        proc.wait(20)
    outcomes = {ids[r["job_id"]]: (r["outcome"], r["exit_code"]) for r in read_events(events)}
    assert outcomes == {
        "hello.sh": ("deleted", 0),
        **{tube: ("buried", 78) for tube in hostile},
    }
    assert not traversal.exists() and not substituted.exists()
