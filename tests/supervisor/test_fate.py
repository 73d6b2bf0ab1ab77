"""A job's fate (issue #19) against the real beanstalkd and the bundled server: exit-code
actions, the timeout policy, jitter, and the reason recorded for every bury and kill."""

from __future__ import annotations

import greenstalk
import pytest

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.config import parse_on_exit
from cmdstalk_py.supervisor.results import Outcome, Reason
from tests.helpers import BeanstalkServer
from tests.supervisor.conftest import config_for, run_one

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
