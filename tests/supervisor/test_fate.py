"""A job's fate (issue #19) against the real beanstalkd and the bundled server: exit-code
actions, the timeout policy, jitter, and the reason recorded for every bury and kill."""

from __future__ import annotations

import subprocess
from pathlib import Path

import greenstalk
import pytest

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.config import parse_on_exit
from cmdstalk_py.supervisor.results import Outcome, Reason
from tests.helpers import BeanstalkServer, wait_until
from tests.ops.procs import stop_process
from tests.supervisor.conftest import config_for, read_events, run_one, start_cmdstalk

RULES = parse_on_exit(["3=delete", "4=release", "5=backoff", "6=bury"])


@pytest.mark.parametrize(
    ("code", "outcome", "state", "delay"),
    [
        (3, Outcome.DELETED, None, None),
        (4, Outcome.RELEASED, "ready", 0),
        (5, Outcome.RELEASED, "delayed", 16),
        (6, Outcome.BURIED, "buried", None),
    ],
)
def test_every_on_exit_action(
    beanstalk: BeanstalkServer, code: int, outcome: Outcome, state: str | None, delay: int | None
) -> None:
    producer = beanstalk.client(use="onexit")
    job_id = producer.put(b"", priority=7, ttr=30)
    # Two earlier releases put the curve at 2**4 = 16 s, so "release" (0) and "backoff"
    # (16) tell apart.
    other = beanstalk.client(watch="onexit")
    for _ in range(2):
        other.release(other.reserve(timeout=5), priority=7)
    broker = Broker(config_for(beanstalk, f"exit {code}", on_exit=RULES), "onexit", 0)
    result = run_one(broker)
    assert (result.outcome, result.exit_code, result.reason) == (outcome, code, Reason.ON_EXIT)
    assert result.release_delay == delay
    if state is None:
        with pytest.raises(greenstalk.NotFoundError):
            producer.stats_job(job_id)
        return
    stats = producer.stats_job(job_id)
    assert (stats["state"], stats["pri"]) == (state, 7)
    if delay is not None:
        assert stats["delay"] == delay


def test_defaults_unchanged_and_bury_exit_codes_shorthand(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="dflt")
    # The failing job last (priority): released with delay 0, it is ready again at once.
    ok, fail, permanent = (producer.put(b"", priority=p, ttr=30) for p in (1, 9, 1))
    cmd = '[ "$CMDSTALK_JOB_ID" = %d ] && exit 0; [ "$CMDSTALK_JOB_ID" = %d ] && exit 1; exit 65'
    config = config_for(beanstalk, cmd % (ok, fail), bury_exit_codes=frozenset({65}))
    broker = Broker(config, "dflt", 0)
    results = {r.job_id: r for r in (run_one(broker) for _ in range(3))}
    assert (results[ok].outcome, results[ok].reason) == (Outcome.DELETED, Reason.EXIT_CODE)
    assert (results[fail].outcome, results[fail].reason) == (Outcome.RELEASED, Reason.EXIT_CODE)
    assert (results[permanent].outcome, results[permanent].reason) == (
        Outcome.BURIED, Reason.ON_EXIT,
    )  # fmt: skip
    assert producer.stats_job(permanent)["state"] == "buried"


def test_jitter_within_the_curve_over_many_jobs(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="jit")
    other = beanstalk.client(watch="jit")
    jobs = [producer.put(b"", ttr=30) for _ in range(40)]
    for _ in range(2):  # two releases each: the curve is 2**3 = 8 s, capped at 5
        held = [other.reserve(timeout=5) for _ in jobs]
        for job in held:
            other.release(job)
    config = config_for(
        beanstalk, "exit 1", backoff_jitter=True, backoff_exponent=3.0, backoff_max=5
    )
    broker = Broker(config, "jit", 0)
    results = [run_one(broker) for _ in jobs]
    delays = [r.release_delay for r in results]
    assert all(d is not None and 0 <= d <= 5 for d in delays), delays
    assert len(set(delays)) >= 3, delays  # spread, not all at the cap
    last = {r.job_id: r for r in results}  # a job released with delay 0 may come back
    for r in last.values():  # the delay reported is the delay the server holds
        assert producer.stats_job(r.job_id)["delay"] == r.release_delay


def test_reasons_in_the_event_log_and_the_log_lines(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    script = (
        'read -r what; case "$what" in '
        "perm) exit 3 ;; "
        "slow) exec sleep 30 ;; "
        "note) echo 'progress 2 of 2' >&3 ;; "
        "ask) echo bury >&3; exit 1 ;; "
        "esac"
    )
    producer = beanstalk.client(use="why")
    jobs = {what: producer.put(what.encode(), ttr=30) for what in ("perm", "slow", "note", "ask")}
    proc = start_cmdstalk(
        "--address", beanstalk.address, "--tubes", "why", "--cmd", script,
        "--events", str(events), "--on-exit", "3=bury", "--max-runtime", "1",
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: len(read_events(events)) >= 4, 30, message="4 event records")
    finally:
        stop_process(proc)
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode()
    by_id = {r["job_id"]: r for r in read_events(events)}
    fate = {what: by_id[i] for what, i in jobs.items()}
    assert {w: (r["outcome"], r["reason"], r["killed"]) for w, r in fate.items()} == {
        "perm": ("buried", "on_exit", None),
        "slow": ("timeout_buried", "max_runtime", "max_runtime"),
        "note": ("deleted", "exit_code", None),
        "ask": ("buried", "command_request", None),
    }
    assert fate["note"]["progress"] == "2 of 2"
    assert fate["perm"]["exit_code"] == 3 and fate["slow"]["signal"] == "SIGTERM"
    assert all(r["schema"] == 4 for r in fate.values())
    assert "exit 3, buried by on_exit" in stderr
    assert "killed by SIGTERM (max_runtime), timeout_buried by max_runtime" in stderr
    assert "exit 1, buried by command_request" in stderr


def test_precheck_names_its_limit(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="limits")
    other = beanstalk.client(watch="limits")
    job_id = producer.put(b"", ttr=30)
    for _ in range(3):
        other.release(other.reserve(timeout=5))
    broker = Broker(config_for(beanstalk, "true", max_releases=3), "limits", 0)
    result = run_one(broker)
    assert (result.job_id, result.outcome, result.reason) == (
        job_id, Outcome.PRECHECK_BURIED, Reason.MAX_RELEASES,
    )  # fmt: skip
