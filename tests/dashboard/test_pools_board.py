"""The dashboard of a supervisor running two pools from a config file (issues #18, #19,
#20): each running job names its own pool, and its elapsed time is shown against the limit
that applies to it: its TTR, or ``max_runtime`` under ``keep_alive``, or none at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.dashboard.supervised import Supervised, supervised_pools
from tests.helpers import BeanstalkServer, wait_until

POOLS = """
[pools.plain]
tubes = ["alpha"]

[pools.bounded]
tubes = ["beta", "gamma"]
workers = 2
keep_alive = true
max_runtime = 90

[pools.endless]
tubes = ["delta"]
keep_alive = true
"""


def _job(sup: Supervised, job_id: int) -> dict[str, Any]:
    jobs = wait_until(lambda: [j for j in sup.running() if j["job_id"] == job_id], timeout=30,
                      message=f"job {job_id} running")  # fmt: skip
    return jobs[0]


def test_each_job_shows_its_pool_and_its_limit(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    client = beanstalk.client()
    ids: dict[str, int] = {}
    with supervised_pools(beanstalk, tmp_path, POOLS) as sup:
        for tube in ("alpha", "beta", "delta"):
            client.use(tube)
            ids[tube] = client.put(b"slow", ttr=120)
        seen = {tube: _job(sup, job_id) for tube, job_id in ids.items()}
        shown = {t: (j["pool"], j["tube"], j["limit"], j["limit_kind"]) for t, j in seen.items()}
        assert shown == {
            "alpha": ("plain", "alpha", 120.0, "ttr"),
            "beta": ("bounded", "beta", 90.0, "max_runtime"),
            "delta": ("endless", "delta", None, None),
        }
        # A shared worker's job leaves the board when its command ends (the worker is named
        # by its pool, the job by its tube: both name the same entry).
        client.use("gamma")
        quick = client.put(b"quick")
        wait_until(lambda: any(f["job_id"] == quick for f in sup.state()["finished"]),
                   timeout=30, message="the quick job finished")  # fmt: skip
        wait_until(lambda: sorted(j["job_id"] for j in sup.running()) == sorted(ids.values()),
                   timeout=30, message="only the three slow jobs running")  # fmt: skip
