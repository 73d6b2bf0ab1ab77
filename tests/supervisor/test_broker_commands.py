"""What a worker asks the server per job, counted by the server itself (issue #18's drain).

A shared worker (``--workers``) runs the same ``Broker`` as a per-tube one, through a
``WatchPlan`` over its pool's tubes and ``Gate``. Over the same tube it must cost the server
exactly what a per-tube worker costs: a ``stats-job`` and a ``delete`` per job, the next
``reserve`` sent in the same write as the ``delete``, and no ``watch``, ``ignore``,
``stats`` or ``list-tubes`` once it runs. Both servers.
"""

from __future__ import annotations

from typing import Any

import greenstalk

from cmdstalk_py.supervisor.broker import Broker
from cmdstalk_py.supervisor.gate import Gate
from cmdstalk_py.supervisor.results import Outcome
from cmdstalk_py.supervisor.watchplan import WatchPlan
from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import config_for, supervising

JOBS = 12
WORKERS = 2
# Counters a worker could move per job; cmd-stats-tube is left out: the test polls it.
COUNTED = (
    "cmd-reserve", "cmd-reserve-with-timeout", "cmd-watch", "cmd-ignore", "cmd-stats-job",
    "cmd-delete", "cmd-release", "cmd-bury", "cmd-stats", "cmd-list-tubes", "cmd-use",
    "cmd-touch", "total-connections",
)  # fmt: skip


def _counters(client: greenstalk.Client[Any]) -> dict[str, int]:
    stats = client.stats()
    return {key: int(str(stats[key])) for key in COUNTED}  # type: ignore[literal-required]


def _per_job_commands(server: BeanstalkServer, tube: str, **mode: Any) -> dict[str, int]:
    """The server's counters moved while ``JOBS`` jobs of ``tube`` ran, past startup."""
    client = server.client(use=tube)
    with supervising(server, "cat >/dev/null", tubes=(tube,), **mode) as run:
        wait_until(
            lambda: int(client.stats_tube(tube)["current-waiting"]) == WORKERS, 15,
            message=f"{WORKERS} workers blocked in reserve on {tube}",
        )  # fmt: skip
        before = _counters(client)
        ids = [client.put(b"job", ttr=30) for _ in range(JOBS)]
        results = run.collector.wait_results(JOBS, timeout=30)
        assert sorted(r.job_id for r in results) == ids
        assert all(r.outcome is Outcome.DELETED for r in results)
        # Every worker is back in the reserve that went out with its last delete.
        wait_until(
            lambda: int(client.stats_tube(tube)["current-waiting"]) == WORKERS, 15,
            message="the workers blocked in reserve again",
        )  # fmt: skip
        after = _counters(client)
    return {key: after[key] - before[key] for key in COUNTED}


def test_a_shared_worker_asks_per_job_what_a_per_tube_worker_asks(
    beanstalk: BeanstalkServer,
) -> None:
    shared = _per_job_commands(beanstalk, "cmds-shared", workers=WORKERS)
    per_tube = _per_job_commands(beanstalk, "cmds-per-tube", per_tube=WORKERS)
    assert shared == per_tube
    # One reserve, one stats-job and one delete a job; the one stats is the test's own.
    assert shared == {
        **dict.fromkeys(COUNTED, 0),
        "cmd-reserve": JOBS, "cmd-stats-job": JOBS, "cmd-delete": JOBS, "cmd-stats": 1,
    }  # fmt: skip


def test_a_shared_worker_sends_its_next_reserve_with_the_delete(
    beanstalk: BeanstalkServer,
) -> None:
    """Over two tubes, with a gate that counts: the reserve is reserved server-side before
    the broker reads its reply (it went out with the delete, not after it)."""
    producer = beanstalk.client()
    ids = []
    for tube in ("ahead-a", "ahead-b"):
        producer.use(tube)
        ids.append(producer.put(tube.encode(), ttr=30))
    config = config_for(beanstalk, "cat >/dev/null", tubes=("ahead-a", "ahead-b"), workers=1)
    plan = WatchPlan(("ahead-a", "ahead-b"), Gate({}, {}, 0.0))
    broker = Broker(config, "pool", 0, plan=plan)
    try:
        first = broker.run_once(prefetch=True)
        assert first is not None and first.outcome is Outcome.DELETED
        assert broker.reserve_sent_ahead
        (second,) = set(ids) - {first.job_id}
        wait_until(
            lambda: producer.stats_job(second)["state"] == "reserved", 10,
            message="the job reserved by the reserve sent with the delete",
        )  # fmt: skip
        result = broker.run_once(prefetch=False)
        assert result is not None and result.job_id == second
    finally:
        broker.close()
