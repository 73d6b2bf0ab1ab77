"""A reference model of the binlog's content and a random workload driving both."""

from __future__ import annotations

import random

from cmdstalk_py.server.binlog import Binlog, JobRecord, StoredState

T0 = 1_700_000_000.0  # wall-clock epoch used for created_at / deadlines


def make_job(job_id: int, rng: random.Random, tube: bytes | None = None) -> JobRecord:
    """A job with random, binary-heavy content."""
    state = rng.choice(list(StoredState))
    delay = rng.randint(1, 3600) if state is StoredState.DELAYED else rng.choice([0, 0, 5])
    body_len = rng.choice([0, 1, 7, 100, 1000, rng.randint(0, 5000)])
    return JobRecord(
        id=job_id,
        tube=tube or rng.choice([b"default", b"emails", b"t-" + b"x" * rng.randint(1, 190)]),
        body=rng.randbytes(body_len),
        pri=rng.choice([0, 1, 1023, 1024, 2**31, 2**32 - 1]),
        ttr=rng.choice([1, 60, 2**32 - 1]),
        delay=delay,
        state=state,
        created_at=T0 + job_id * 0.001,
        deadline=T0 + job_id * 0.001 + delay if state is StoredState.DELAYED else 0.0,
        reserves=rng.randint(0, 3),
        timeouts=rng.randint(0, 2),
        releases=rng.randint(0, 2),
        buries=rng.randint(0, 2),
        kicks=rng.randint(0, 2),
    )


def changed(rec: JobRecord, rng: random.Random) -> JobRecord:
    """``rec`` after a random state change (release, bury, kick, timeout...)."""
    state = rng.choice(list(StoredState))
    delay = rng.randint(1, 100) if state is StoredState.DELAYED else rec.delay
    return rec._replace(
        state=state,
        pri=rng.choice([rec.pri, 0, 77, 2**32 - 1]),
        delay=delay,
        deadline=T0 + 500 + delay if state is StoredState.DELAYED else 0.0,
        reserves=rec.reserves + 1,
        timeouts=rec.timeouts + rng.randint(0, 1),
        releases=rec.releases + rng.randint(0, 1),
        buries=rec.buries + (state is StoredState.BURIED),
        kicks=rec.kicks + rng.randint(0, 1),
    )


class Model:
    """What the log should contain: the jobs, and the history of states."""

    def __init__(self, jobs: dict[int, JobRecord] | None = None, next_id: int = 1) -> None:
        self.jobs: dict[int, JobRecord] = dict(jobs or {})
        self.next_id = next_id
        self.history: list[dict[int, JobRecord]] = [dict(self.jobs)]
        self.next_history: list[int] = [next_id]

    def lookup(self, job_id: int) -> JobRecord | None:
        return self.jobs.get(job_id)

    def step(self, binlog: Binlog, rng: random.Random, put_weight: float = 0.45) -> None:
        """One random mutation applied to the binlog, then (if it succeeded) to the model."""
        roll = rng.random()
        if roll < put_weight or not self.jobs:
            rec = make_job(self.next_id, rng)
            binlog.put(rec)
            self.next_id += 1
            self.jobs[rec.id] = rec
        elif roll < put_weight + 0.25:
            jid = rng.choice(list(self.jobs))
            rec = changed(self.jobs[jid], rng)
            binlog.update(rec)
            self.jobs[jid] = rec
        else:
            jid = rng.choice(list(self.jobs))
            binlog.delete(jid)
            del self.jobs[jid]
        self.history.append(dict(self.jobs))
        self.next_history.append(self.next_id)
