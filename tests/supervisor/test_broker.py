"""The broker against real servers and real processes: Go cmdstalk's cases and the policy."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

import greenstalk
import pytest

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.budget import JobBudget
from cmdstalk_py.supervisor.results import Outcome
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import Collector, config_for, run_one


def test_success_deletes_and_captures_output(beanstalk: BeanstalkServer) -> None:
    # Go: TestWorkerSuccess (payload through `tr a-z A-Z`, job deleted).
    producer = beanstalk.client(use="go")
    job_id = producer.put(b"hello world", priority=5, ttr=30)
    seen = Collector()
    broker = Broker(config_for(beanstalk, "tr a-z A-Z"), "go", 0, seen)
    result = run_one(broker)
    assert (result.job_id, result.outcome, result.exit_code) == (job_id, Outcome.DELETED, 0)
    assert result.stdout_tail == "HELLO WORLD"
    assert (result.tube, result.slot, result.priority, result.ttr) == ("go", 0, 5, 30)
    assert result.payload_bytes == 11
    assert seen.results == [result]
    assert seen.busy == [("go", 0, True), ("go", 0, False)]
    assert [tube for tube, _ in seen.waits] == ["go"]
    with pytest.raises(greenstalk.NotFoundError):
        producer.stats_job(job_id)


def test_failure_releases_with_priority_kept(beanstalk: BeanstalkServer) -> None:
    # Go: TestWorkerFailure (`false` releases the job, releases=1, priority unchanged).
    producer = beanstalk.client(use="go")
    job_id = producer.put(b"x", priority=1234, ttr=30)
    broker = Broker(config_for(beanstalk, "false"), "go", 0)
    result = run_one(broker)
    assert (result.outcome, result.exit_code, result.release_delay) == (Outcome.RELEASED, 1, 0)
    stats = producer.stats_job(job_id)
    assert (stats["releases"], stats["pri"], stats["state"]) == (1, 1234, "ready")


def test_ttr_1_sleep_is_killed_and_buried(beanstalk: BeanstalkServer) -> None:
    # Go: TestWorkerTimeout (TTR 1, `sleep 4`: killed and buried). With TTR 1 our kill
    # (TERM at 0.5 s, KILL at 0.75 s) normally beats the server; on a loaded machine the
    # server may expire it first, and then the next reservation buries it unrun.
    producer = beanstalk.client(use="go")
    job_id = producer.put(b"", ttr=1)
    seen = Collector()
    broker = Broker(config_for(beanstalk, "sleep 4"), "go", 0, seen)
    first = run_one(broker)
    assert first.duration_ms < 3000, "killed long before sleep 4 would end"
    if first.outcome is Outcome.LOST:
        assert run_one(broker).outcome is Outcome.PRECHECK_BURIED
    else:
        assert first.outcome is Outcome.TIMEOUT_BURIED
        assert first.exit_code is None and first.signal is not None
    assert producer.stats_job(job_id)["state"] == "buried"
    assert ("go", "SIGTERM") in seen.kills


def test_ttr_kill_lands_before_the_server_expiry(beanstalk: BeanstalkServer) -> None:
    # TTR 3: TERM at 1.5 s, KILL at 2.25 s, bury well before 3 s: the server never
    # counts a timeout, so a later kick gives the job a clean new try.
    producer = beanstalk.client(use="ttr")
    job_id = producer.put(b"", ttr=3)
    broker = Broker(config_for(beanstalk, "sleep 30"), "ttr", 0)
    result = run_one(broker)
    assert result.outcome is Outcome.TIMEOUT_BURIED
    assert 1400 < result.duration_ms < 2900
    stats = producer.stats_job(job_id)
    assert (stats["state"], stats["timeouts"], stats["buries"]) == ("buried", 0, 1)


def test_command_environment(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="env")
    job_id = producer.put(b"secret-payload", priority=9, ttr=40)
    # A producer's retry re-puts the same bytes: the duplicate gets the same key.
    twin_id = producer.put(b"secret-payload", ttr=40)
    other_id = producer.put(b"other-payload", ttr=40)
    broker = Broker(config_for(beanstalk, "env | sort"), "env", 0, environ={"KEEP": "me"})
    result = run_one(broker)
    env = dict(line.split("=", 1) for line in result.stdout_tail.splitlines() if "=" in line)
    assert env["KEEP"] == "me"
    expected = {
        "CMDSTALK_JOB_ID": str(job_id),
        "CMDSTALK_TUBE": "env",
        "CMDSTALK_PRIORITY": "9",
        "CMDSTALK_TTR": "40",
        "CMDSTALK_RELEASES": "0",
        "CMDSTALK_TIMEOUTS": "0",
        "CMDSTALK_RESERVES": "1",
        "CMDSTALK_AGE": env["CMDSTALK_AGE"],
        # The same string as cmdstalk_py.spark.datasource.with_idempotency_key.
        "CMDSTALK_IDEMPOTENCY_KEY": "sha256:" + hashlib.sha256(b"secret-payload").hexdigest(),
        # The run marker (process/marker.py): this supervisor's pid, then a sequence number.
        "CMDSTALK_RUN": env["CMDSTALK_RUN"],
        # The control channel's fd (process/control.py).
        "CMDSTALK_CONTROL_FD": "3",
    }
    assert {k: v for k, v in env.items() if k.startswith("CMDSTALK_")} == expected
    assert int(env["CMDSTALK_AGE"]) >= 0
    assert env["CMDSTALK_RUN"].startswith(f"{os.getpid()}-")
    assert "secret-payload" not in result.stdout_tail

    def key_of(expected_id: int) -> str:
        result = run_one(broker)
        assert result.job_id == expected_id
        line = next(x for x in result.stdout_tail.splitlines() if "IDEMPOTENCY" in x)
        return line.split("=", 1)[1]

    assert key_of(twin_id) == expected["CMDSTALK_IDEMPOTENCY_KEY"]
    assert key_of(other_id) == "sha256:" + hashlib.sha256(b"other-payload").hexdigest()


def test_backoff_delays_measured_from_stats_job(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="backoff")
    job_id = producer.put(b"", priority=3, ttr=30)
    broker = Broker(config_for(beanstalk, "exit 1"), "backoff", 0)
    delays = []
    for expected_delay in (0, 1, 16, 81):
        result = run_one(broker)
        assert result.outcome is Outcome.RELEASED
        delays.append(result.release_delay)
        stats = producer.stats_job(job_id)
        assert stats["delay"] == expected_delay  # what the server really holds
        assert stats["pri"] == 3
        if stats["state"] == "delayed":
            producer.kick_job(job_id)  # no need to wait minutes for the next try
    assert delays == [0, 1, 16, 81]


def test_backoff_options(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="curve")
    job_id = producer.put(b"", ttr=30)
    config = config_for(beanstalk, "exit 1", backoff_exponent=2.0, backoff_max=3)
    broker = Broker(config, "curve", 0)
    seen = []
    for _ in range(3):
        seen.append(run_one(broker).release_delay)
        if producer.stats_job(job_id)["state"] == "delayed":
            producer.kick_job(job_id)
    assert seen == [0, 1, 3]  # 0², 1², min(2², 3)


def test_bury_after_max_releases(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    producer = beanstalk.client(use="maxrel")
    job_id = producer.put(b"", ttr=30)
    runs = tmp_path / "runs"
    config = config_for(beanstalk, f"echo run >> {runs}; exit 2", max_releases=3, backoff_max=0)
    broker = Broker(config, "maxrel", 0)
    # Go: every failure releases; reserved with 3 releases, the job is buried unrun.
    results = [run_one(broker) for _ in range(4)]
    assert [r.outcome for r in results] == [Outcome.RELEASED] * 3 + [Outcome.PRECHECK_BURIED]
    assert (results[-1].releases, results[-1].exit_code) == (3, None)
    stats = producer.stats_job(job_id)
    assert (stats["state"], stats["releases"]) == ("buried", 3)
    assert runs.read_text().count("run") == 3


def test_precheck_buries_without_running(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    # A job released 10 times by someone else (e.g. Go cmdstalk) is buried unrun.
    producer = beanstalk.client(use="pre")
    other = beanstalk.client(watch="pre")
    job_id = producer.put(b"", ttr=30)
    for _ in range(10):
        other.release(other.reserve(timeout=5))
    marker = tmp_path / "ran"
    broker = Broker(config_for(beanstalk, f"touch {marker}"), "pre", 0)
    result = run_one(broker)
    assert (result.outcome, result.releases, result.exit_code) == (
        Outcome.PRECHECK_BURIED,
        10,
        None,
    )
    assert producer.stats_job(job_id)["state"] == "buried"
    assert not marker.exists()
    # A kick forgives the limit: the job gets one more real try.
    producer.kick_job(job_id)
    assert run_one(broker).outcome is Outcome.DELETED
    assert marker.exists()


def test_precheck_buries_a_job_that_timed_out_on_the_server(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="tmo")
    other = beanstalk.client(watch="tmo")
    job_id = producer.put(b"", ttr=1)
    other.reserve(timeout=5)  # and never answer: the server times it out.
    # Polled through the holder's own connection: beanstalkd 1.12 reliably expires a
    # reservation when its connection is active, only sometimes when it sits idle.
    wait_until(lambda: other.stats_job(job_id)["timeouts"] == 1, 10, message="server timeout")
    broker = Broker(config_for(beanstalk, "true"), "tmo", 0)
    result = run_one(broker)
    assert (result.outcome, result.timeouts) == (Outcome.PRECHECK_BURIED, 1)
    assert producer.stats_job(job_id)["state"] == "buried"


def test_bury_exit_codes(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="perm")
    job_id = producer.put(b"", ttr=30)
    broker = Broker(config_for(beanstalk, "exit 78", bury_exit_codes=frozenset({78})), "perm", 0)
    result = run_one(broker)
    assert (result.outcome, result.exit_code) == (Outcome.BURIED, 78)
    assert producer.stats_job(job_id)["state"] == "buried"


def test_spawn_failure_releases(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="spawn")
    job_id = producer.put(b"", ttr=30)
    broker = Broker(config_for(beanstalk, "x", shell=("/nonexistent/shell",)), "spawn", 0)
    result = run_one(broker)
    assert result.outcome is Outcome.RELEASED
    assert result.exit_code is None and result.error
    assert producer.stats_job(job_id)["releases"] == 1


def test_broker_watches_only_its_tube(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client()
    producer.put(b"in default", ttr=30)
    producer.use("mine")
    mine = producer.put(b"in mine", ttr=30)
    broker = Broker(config_for(beanstalk, "cat"), "mine", 0)
    assert run_one(broker).job_id == mine
    assert broker.run_once() is None  # the default tube's job is not ours
    assert producer.stats_tube("default")["current-jobs-ready"] == 1


def test_run_loop_stops_on_idle_timeout_and_max_jobs(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="loop")
    for _ in range(3):
        producer.put(b"", ttr=30)
    broker = Broker(config_for(beanstalk, "true"), "loop", 0)
    assert broker.run(max_jobs=2) == 2
    assert broker.run(idle_timeout=1.0) == 1
    assert producer.stats_tube("loop")["current-jobs-ready"] == 0


def test_broker_connects_while_waiting_for_a_budget_ticket(beanstalk: BeanstalkServer) -> None:
    # --max-jobs below the broker count: readiness needs every broker connected, including
    # those waiting for a ticket another broker holds.
    budget = JobBudget(1)
    assert budget.take()  # the only ticket is held elsewhere
    broker = Broker(config_for(beanstalk, "true"), "ticket", 0, budget=budget)
    stop = threading.Event()
    thread = threading.Thread(target=broker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: broker.connection.connected, 10, message="connected without a ticket")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_a_short_ttr_is_pointed_out_once_per_tube(
    beanstalk: BeanstalkServer, caplog: pytest.LogCaptureFixture
) -> None:
    # TTR 3 s: SIGTERM at 1.5 s, which surprises a Go user; TTR 60 s says nothing.
    tube = f"short-ttr-{beanstalk.kind}"
    producer = beanstalk.client(use=tube)
    for ttr in (3, 3, 60):
        producer.put(b"", ttr=ttr)
    broker = Broker(config_for(beanstalk, "true"), tube, 0)
    with caplog.at_level(logging.WARNING, logger="cmdstalk.broker"):
        for _ in range(3):
            assert run_one(broker).outcome is Outcome.DELETED
    broker.close()
    told = [r.getMessage() for r in caplog.records if "before SIGTERM" in r.getMessage()]
    assert len(told) == 1, told
    assert told[0].startswith(f"tube {tube}: a TTR of 3 s leaves a command 1.5 s before SIGTERM")
