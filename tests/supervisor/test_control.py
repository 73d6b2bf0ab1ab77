"""The control channel end to end (issue #19): a command's ``touch``, ``retry-after``,
``bury`` and ``progress`` requests on fd 3, and garbage or floods that change nothing,
against the real beanstalkd and the bundled server."""

from __future__ import annotations

import logging
import time

import greenstalk
import pytest

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.results import Outcome, Reason
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import config_for, run_one, supervising


def test_touch_extends_the_deadline(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="touchy")
    job_id = producer.put(b"", ttr=3)
    # Killed 1.5 s after its last touch (TTR 3): touching every 0.4 s, it runs 3.2 s.
    cmd = 'for i in 1 2 3 4 5 6 7 8; do sleep 0.4; echo touch >&"$CMDSTALK_CONTROL_FD"; done'
    result = run_one(Broker(config_for(beanstalk, cmd), "touchy", 0), timeout=30)
    assert (result.outcome, result.killed, result.exit_code) == (Outcome.DELETED, None, 0)
    assert result.duration_ms >= 3200
    with pytest.raises(greenstalk.NotFoundError):
        producer.stats_job(job_id)
    assert producer.stats()["job-timeouts"] == 0


def test_touch_stops_at_max_runtime(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="capped")
    producer.put(b"", ttr=3)
    cmd = "while :; do sleep 0.3; echo touch >&3; done"
    config = config_for(beanstalk, cmd, max_runtime=3.5)
    result = run_one(Broker(config, "capped", 0), timeout=30)
    assert (result.outcome, result.killed) == (Outcome.TIMEOUT_BURIED, Reason.MAX_RUNTIME)
    assert 3400 <= result.duration_ms < 9000


def test_retry_after_releases_with_that_delay(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="later")
    job_id = producer.put(b"", priority=3, ttr=30)
    cmd = "echo 'retry-after 7' >&3; exit 1"
    result = run_one(Broker(config_for(beanstalk, cmd), "later", 0))
    assert (result.outcome, result.release_delay, result.reason) == (
        Outcome.RELEASED, 7, Reason.COMMAND_REQUEST,
    )  # fmt: skip
    stats = producer.stats_job(job_id)
    assert (stats["state"], stats["delay"], stats["pri"]) == ("delayed", 7, 3)


def test_a_request_counts_only_on_failure(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="okreq")
    job_id = producer.put(b"", ttr=30)
    cmd = "echo 'retry-after 7' >&3; echo bury >&3; echo 'progress all done' >&3; exit 0"
    result = run_one(Broker(config_for(beanstalk, cmd), "okreq", 0))
    assert (result.outcome, result.progress) == (Outcome.DELETED, "all done")
    with pytest.raises(greenstalk.NotFoundError):
        producer.stats_job(job_id)


def test_bury_request_and_last_progress_note(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="grave")
    job_id = producer.put(b"", ttr=30)
    cmd = "echo 'progress step 1' >&3; echo 'progress step 2' >&3; echo bury >&3; exit 2"
    result = run_one(Broker(config_for(beanstalk, cmd), "grave", 0))
    assert (result.outcome, result.reason, result.exit_code, result.progress) == (
        Outcome.BURIED, Reason.COMMAND_REQUEST, 2, "step 2",
    )  # fmt: skip
    assert producer.stats_job(job_id)["state"] == "buried"


def test_garbage_is_logged_and_ignored(
    beanstalk: BeanstalkServer, caplog: pytest.LogCaptureFixture
) -> None:
    producer = beanstalk.client(use="junk")
    job_id = producer.put(b"", ttr=30)
    cmd = (
        "printf 'explode\\nretry-after soon\\ntouch twice\\n' >&3; "
        "head -c 5000 /dev/zero | tr '\\0' x >&3; echo >&3; exit 0"
    )
    with caplog.at_level(logging.WARNING, logger="cmdstalk.broker"):
        result = run_one(Broker(config_for(beanstalk, cmd), "junk", 0))
    assert (result.job_id, result.outcome, result.reason) == (
        job_id, Outcome.DELETED, Reason.EXIT_CODE,
    )  # fmt: skip
    warnings = [r.getMessage() for r in caplog.records if "control channel" in r.getMessage()]
    # Rate-limited: the first one is logged, the rest are counted when the command ends.
    assert warnings[0].startswith("control channel: unknown request: 'explode'")
    assert warnings[-1] == "control channel: 3 more bad requests ignored"


@pytest.mark.slow
def test_a_flood_on_the_channel_does_not_hold_up_other_jobs(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="flood")
    producer.put(b"flood", ttr=30)
    script = (
        'read -r what; if [ "$what" = flood ]; then '
        "(yes touch & yes nonsense & yes 'progress x' & wait) >&3 & sleep 6; kill %1; fi; exit 0"
    )
    with supervising(beanstalk, script, tubes=("flood",), per_tube=2) as run:
        wait_until(lambda: run.collector.busy_now() == 1, 10, message="the flood job running")
        quick = [producer.put(b"quick %d" % i, ttr=30) for i in range(10)]
        started = time.monotonic()
        for job_id in quick:
            run.collector.wait_outcome(job_id, Outcome.DELETED, timeout=20)
        assert time.monotonic() - started < 5  # all while the flood was still going
        flood = run.collector.wait_results(11, timeout=30)
    assert {r.outcome for r in flood} == {Outcome.DELETED}
