"""The fixtures themselves: a real round trip through each server kind."""

from __future__ import annotations

import greenstalk
import pytest

from tests.helpers import BeanstalkServer, WaitTimeout, wait_until


def test_put_reserve_delete_round_trip(beanstalk: BeanstalkServer) -> None:
    producer = beanstalk.client(use="roundtrip")
    worker = beanstalk.client(watch="roundtrip")
    job_id = producer.put(b"hello \r\n\x00 world", priority=7, ttr=30)
    job = worker.reserve(timeout=5)
    assert job.id == job_id
    assert job.body == "hello \r\n\x00 world"
    stats = worker.stats_job(job)
    assert stats["state"] == "reserved"
    assert stats["pri"] == 7
    worker.delete(job)
    assert producer.stats_tube("roundtrip")["total-jobs"] == 1
    assert producer.stats()["current-jobs-ready"] == 0
    with pytest.raises(greenstalk.NotFoundError):
        worker.stats_job(job_id)


def test_wait_until_returns_value_and_times_out() -> None:
    calls = iter(range(100))
    assert wait_until(lambda: next(calls) >= 3, timeout=1) is True
    with pytest.raises(WaitTimeout, match="never"):
        wait_until(lambda: False, timeout=0.05, message="never")
