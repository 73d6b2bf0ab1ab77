"""The queue engine behind the dispatcher on a fake clock: protocol lines in, replies out;
no sockets, no sleeps; time moves only by hand (the transitions one by one, without
reply bytes: test_transitions.py)."""

from __future__ import annotations

import pytest

from cmdstalk_py.server import commands
from cmdstalk_py.server import protocol as p
from cmdstalk_py.server.engine import Engine
from cmdstalk_py.server.job import Job
from cmdstalk_py.server.journal import NullJournal
from cmdstalk_py.server.session import Session
from cmdstalk_py.server.stats import ServerInfo
from tests.server.journals import RecordingJournal


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0


class World:
    """An engine plus helpers that speak protocol lines (parsed by the real parser)."""

    def __init__(self, journal: NullJournal | None = None) -> None:
        self.clock = Clock()
        info = ServerInfo(pid=1, instance_id="0" * 16, hostname="h", os_version="o",
                          platform="p")
        self.engine = Engine(self.clock.now, journal=journal, info=info, cpu=lambda: (0.0, 0.0))

    def connect(self) -> Session:
        return self.engine.connect()

    def do(self, s: Session, line: str, body: bytes | None = None) -> bytes | None:
        cmd = p.parse_command(line.encode(), self.engine.max_job_size)
        if isinstance(cmd, p.Put):
            data = (body if body is not None else b"x" * cmd.size) + b"\r\n"
            return commands.put_body(self.engine, s, cmd, data, self.clock.now)
        return commands.execute(self.engine, s, cmd, self.clock.now)

    def put(self, s: Session, pri: int = 0, delay: int = 0, ttr: int = 60,
            body: bytes = b"job") -> int:
        reply = self.do(s, f"put {pri} {delay} {ttr} {len(body)}", body)
        assert reply is not None and reply.startswith(b"INSERTED "), reply
        return int(reply.split()[1])

    def reserved_id(self, reply: bytes | None) -> int:
        assert reply is not None and reply.startswith(b"RESERVED "), reply
        return int(reply.split()[1])

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.engine.tick(self.clock.now)

    def deliveries(self) -> list[tuple[Session, bytes]]:
        return commands.deliveries(self.engine)

    def yaml(self, s: Session, line: str) -> dict[str, str]:
        reply = self.do(s, line)
        assert reply is not None and reply.startswith(b"OK "), reply
        body = reply.split(b"\r\n", 1)[1][:-2].decode()
        assert body.startswith("---\n")
        out: dict[str, str] = {}
        for row in body[4:].splitlines():
            key, _, value = row.partition(": ")
            out[key] = value
        return out

    def stats(self, s: Session) -> dict[str, str]:
        return self.yaml(s, "stats")


@pytest.fixture
def w() -> World:
    return World()


# ------------------------------------------------------------------ ordering


def test_ready_order_is_priority_then_id(w: World) -> None:
    c = w.connect()
    a = w.put(c, pri=5)
    b = w.put(c, pri=1)
    d = w.put(c, pri=5)
    e = w.put(c, pri=1)
    got = [w.reserved_id(w.do(c, "reserve")) for _ in range(4)]
    assert got == [b, e, a, d]


def test_released_job_goes_back_by_id_not_by_time(w: World) -> None:
    c = w.connect()
    first = w.put(c)
    w.put(c)
    assert w.reserved_id(w.do(c, "reserve")) == first
    assert w.do(c, f"release {first} 0 0") == p.RELEASED
    # Same priority: the lower id wins even though it became ready later.
    assert w.reserved_id(w.do(c, "reserve")) == first


def test_reserve_across_watched_tubes_skips_paused(w: World) -> None:
    prod, worker = w.connect(), w.connect()
    w.do(prod, "use a")
    low_a = w.put(prod, pri=1)
    w.do(prod, "use b")
    b_job = w.put(prod, pri=7)
    w.do(worker, "watch a")
    w.do(worker, "watch b")
    w.do(worker, "pause-tube a 30")
    assert w.reserved_id(w.do(worker, "reserve")) == b_job
    w.advance(31)
    assert w.reserved_id(w.do(worker, "reserve")) == low_a


# ------------------------------------------------------------------ delays


def test_delayed_job_becomes_ready_on_tick(w: World) -> None:
    c = w.connect()
    job = w.put(c, delay=10)
    assert w.engine.next_deadline() == pytest.approx(w.clock.now + 10)
    assert w.yaml(c, f"stats-job {job}")["state"] == "delayed"
    assert w.yaml(c, f"stats-job {job}")["time-left"] == "10"
    w.advance(9.5)
    assert w.do(c, "reserve-with-timeout 0") == p.TIMED_OUT
    w.advance(0.5)
    assert w.reserved_id(w.do(c, "reserve-with-timeout 0")) == job
    # The delay stat keeps its value after the job became ready.
    assert w.yaml(c, f"stats-job {job}")["delay"] == "10"


def test_peek_delayed_earliest_then_lowest_id_and_kick_order(w: World) -> None:
    c = w.connect()
    late = w.put(c, delay=20)
    early = w.put(c, delay=5)
    tie = w.put(c, delay=5)
    assert w.do(c, "peek-delayed") == p.render_found(early, b"job\r\n")
    assert w.do(c, "kick 2") == p.render_kicked(2)
    assert w.yaml(c, f"stats-job {tie}")["state"] == "ready"
    assert w.yaml(c, f"stats-job {late}")["state"] == "delayed"
    assert w.yaml(c, f"stats-job {early}")["kicks"] == "1"


def test_release_with_delay(w: World) -> None:
    c = w.connect()
    job = w.put(c)
    w.do(c, "reserve")
    assert w.do(c, f"release {job} 3 7") == p.RELEASED
    st = w.yaml(c, f"stats-job {job}")
    assert (st["state"], st["pri"], st["delay"], st["releases"]) == ("delayed", "3", "7", "1")
    w.advance(7)
    assert w.yaml(c, f"stats-job {job}")["state"] == "ready"


# ------------------------------------------------------------------ TTR


def test_ttr_expiry_releases_on_time(w: World) -> None:
    owner, other = w.connect(), w.connect()
    job = w.put(owner, ttr=2)
    w.do(owner, "reserve")
    assert w.yaml(owner, f"stats-job {job}")["time-left"] == "2"
    w.advance(1.999)
    assert w.yaml(owner, f"stats-job {job}")["state"] == "reserved"
    w.advance(0.001)
    st = w.yaml(owner, f"stats-job {job}")
    assert (st["state"], st["timeouts"]) == ("ready", "1")
    assert w.stats(owner)["job-timeouts"] == "1"
    assert w.do(owner, f"release {job} 0 0") == p.NOT_FOUND
    assert w.do(owner, f"touch {job}") == p.NOT_FOUND
    assert w.do(other, f"delete {job}") == p.DELETED


def test_ttr_zero_becomes_one_and_touch_extends(w: World) -> None:
    c = w.connect()
    job = w.put(c, ttr=0)
    assert w.yaml(c, f"stats-job {job}")["ttr"] == "1"
    job2 = w.put(c, ttr=5)
    w.do(c, f"delete {job}")
    w.do(c, "reserve")
    w.advance(4)
    assert w.do(c, f"touch {job2}") == p.TOUCHED
    w.advance(4)
    assert w.yaml(c, f"stats-job {job2}")["state"] == "reserved"
    w.advance(1)
    assert w.yaml(c, f"stats-job {job2}")["state"] == "ready"


def test_expired_job_goes_to_a_waiter(w: World) -> None:
    owner, waiter = w.connect(), w.connect()
    job = w.put(owner, ttr=3)
    w.do(owner, "reserve")
    assert w.do(waiter, "reserve") is None
    w.advance(3)
    assert w.deliveries() == [(waiter, p.render_reserved(job, b"job\r\n"))]


# ------------------------------------------------------------------ DEADLINE_SOON


def test_deadline_soon_inside_margin_unless_a_job_is_ready(w: World) -> None:
    c = w.connect()
    job = w.put(c, ttr=1)
    w.do(c, "reserve")
    assert w.do(c, "reserve") == p.DEADLINE_SOON
    assert w.do(c, "reserve-with-timeout 0") == p.DEADLINE_SOON
    other = w.put(c)
    assert w.reserved_id(w.do(c, "reserve")) == other
    assert w.yaml(c, f"stats-job {job}")["state"] == "reserved"


def test_deadline_soon_follows_the_soonest_reservation_through_touch_and_delete(
    w: World,
) -> None:
    # The session remembers its soonest reservation instead of scanning them all per
    # reserve; touch and delete must move that on.
    c = w.connect()
    short, long = w.put(c, ttr=3), w.put(c, ttr=5)
    assert [w.reserved_id(w.do(c, "reserve")) for _ in range(2)] == [short, long]
    assert w.do(c, "reserve-with-timeout 0") == p.TIMED_OUT
    w.advance(2.5)
    assert w.do(c, "reserve-with-timeout 0") == p.DEADLINE_SOON
    assert w.do(c, f"touch {short}") == p.TOUCHED  # ends at 5.5 now, after long (5)
    assert w.do(c, "reserve-with-timeout 0") == p.TIMED_OUT
    w.advance(1.6)
    assert w.do(c, "reserve-with-timeout 0") == p.DEADLINE_SOON  # long's margin
    assert w.do(c, f"delete {long}") == p.DELETED
    assert w.do(c, "reserve-with-timeout 0") == p.TIMED_OUT  # short's margin from 4.5
    w.advance(0.5)
    assert w.do(c, "reserve-with-timeout 0") == p.DEADLINE_SOON
    assert w.do(c, f"release {short} 0 0") == p.RELEASED
    assert w.reserved_id(w.do(c, "reserve-with-timeout 0")) == short


def test_blocked_reserve_gets_deadline_soon_one_second_before(w: World) -> None:
    c = w.connect()
    job = w.put(c, ttr=3)
    w.do(c, "reserve")
    assert w.do(c, "reserve-with-timeout 10") is None
    w.advance(1.9)
    assert w.deliveries() == []
    w.advance(0.1)
    assert w.deliveries() == [(c, p.DEADLINE_SOON)]
    # The job stays reserved until its own deadline.
    assert w.yaml(c, f"stats-job {job}")["state"] == "reserved"
    assert w.stats(c)["current-waiting"] == "0"


def test_deadline_soon_wins_over_timed_out(w: World) -> None:
    c = w.connect()
    w.put(c, ttr=3)
    w.do(c, "reserve")
    assert w.do(c, "reserve-with-timeout 2") is None
    w.advance(2)
    assert w.deliveries() == [(c, p.DEADLINE_SOON)]


# ------------------------------------------------------------------ waiting


def test_waiters_are_served_first_come_first_served(w: World) -> None:
    prod = w.connect()
    waiters = [w.connect() for _ in range(4)]
    for s in waiters:
        assert w.do(s, "reserve") is None
    assert w.stats(prod)["current-waiting"] == "4"
    ids = [w.put(prod) for _ in range(4)]
    got = w.deliveries()
    assert [s for s, _ in got] == waiters
    assert [w.reserved_id(r) for _, r in got] == ids


def test_reserve_with_timeout_times_out_and_stops_waiting(w: World) -> None:
    c, prod = w.connect(), w.connect()
    assert w.do(c, "reserve-with-timeout 5") is None
    assert w.engine.next_deadline() == pytest.approx(w.clock.now + 5)
    w.advance(4.9)
    assert w.deliveries() == []
    w.advance(0.1)
    assert w.deliveries() == [(c, p.TIMED_OUT)]
    w.put(prod)
    assert w.deliveries() == []
    assert w.yaml(prod, "stats-tube default")["current-jobs-ready"] == "1"


def test_pause_end_serves_waiters(w: World) -> None:
    c, prod = w.connect(), w.connect()
    w.do(c, "pause-tube default 5")
    job = w.put(prod)
    assert w.do(c, "reserve") is None
    st = w.yaml(prod, "stats-tube default")
    assert (st["pause"], st["pause-time-left"], st["cmd-pause-tube"]) == ("5", "5", "1")
    w.advance(5)
    assert w.deliveries() == [(c, p.render_reserved(job, b"job\r\n"))]
    st = w.yaml(prod, "stats-tube default")
    assert (st["pause"], st["pause-time-left"]) == ("0", "0")


def test_abort_wait_and_disconnect_of_a_waiter(w: World) -> None:
    c, d, prod = w.connect(), w.connect(), w.connect()
    w.do(c, "reserve")
    assert commands.abort_wait(w.engine, c) == p.TIMED_OUT
    assert commands.abort_wait(w.engine, c) is None
    w.do(d, "reserve")
    w.engine.disconnect(d, w.clock.now)
    job = w.put(prod)
    assert w.deliveries() == []
    assert w.yaml(prod, f"stats-job {job}")["state"] == "ready"


def test_disconnect_releases_reserved_jobs_to_waiters_in_priority_order(w: World) -> None:
    owner, prod = w.connect(), w.connect()
    a = w.put(prod, pri=9)
    b = w.put(prod, pri=1)
    w.do(owner, "reserve")
    w.do(owner, "reserve")
    waiter = w.connect()
    assert w.do(waiter, "reserve") is None
    w.engine.disconnect(owner, w.clock.now)
    assert w.deliveries() == [(waiter, p.render_reserved(b, b"job\r\n"))]
    st = w.yaml(prod, f"stats-job {a}")
    assert (st["state"], st["reserves"], st["releases"]) == ("ready", "1", "0")


# ------------------------------------------------------------------ jobs by state


def test_delete_rules(w: World) -> None:
    owner, other = w.connect(), w.connect()
    job = w.put(owner)
    w.do(owner, "reserve")
    assert w.do(other, f"delete {job}") == p.NOT_FOUND
    assert w.do(other, f"release {job} 0 0") == p.NOT_FOUND
    assert w.do(owner, f"delete {job}") == p.DELETED
    delayed = w.put(owner, delay=100)
    assert w.do(other, f"delete {delayed}") == p.DELETED
    assert w.do(other, "delete 999") == p.NOT_FOUND
    assert w.stats(other)["cmd-delete"] == "4"


def test_bury_and_kick_buried_first(w: World) -> None:
    c = w.connect()
    a, b = w.put(c), w.put(c)
    delayed = w.put(c, delay=50)
    w.do(c, "reserve")
    w.do(c, "reserve")
    assert w.do(c, f"bury {b} 3") == p.BURIED
    assert w.do(c, f"bury {a} 4") == p.BURIED
    assert w.do(c, "peek-buried") == p.render_found(b, b"job\r\n")
    assert w.do(c, "kick 0") == p.render_kicked(0)
    # Buried jobs exist, so only they are kicked, oldest first.
    assert w.do(c, "kick 10") == p.render_kicked(2)
    assert w.yaml(c, f"stats-job {delayed}")["state"] == "delayed"
    st = w.yaml(c, f"stats-job {b}")
    assert (st["state"], st["pri"], st["buries"], st["kicks"]) == ("ready", "3", "1", "1")
    assert w.do(c, "kick 10") == p.render_kicked(1)


def test_kick_job_rules(w: World) -> None:
    c = w.connect()
    ready = w.put(c)
    assert w.do(c, f"kick-job {ready}") == p.NOT_FOUND
    delayed = w.put(c, delay=9)
    assert w.do(c, f"kick-job {delayed}") == p.KICKED
    assert w.yaml(c, f"stats-job {delayed}")["state"] == "ready"
    w.do(c, f"reserve-job {ready}")
    assert w.do(c, f"kick-job {ready}") == p.NOT_FOUND
    assert "cmd-kick-job" not in w.stats(c)


def test_reserve_job_any_state_and_tube(w: World) -> None:
    c, other = w.connect(), w.connect()
    w.do(c, "use elsewhere")
    w.do(c, "pause-tube elsewhere 100")
    delayed = w.put(c, delay=30)
    assert w.reserved_id(w.do(other, f"reserve-job {delayed}")) == delayed
    assert w.do(c, f"reserve-job {delayed}") == p.NOT_FOUND
    assert w.do(other, f"bury {delayed} 0") == p.BURIED
    assert w.reserved_id(w.do(c, f"reserve-job {delayed}")) == delayed
    st = w.stats(c)
    assert (st["current-workers"], st["cmd-reserve"]) == ("2", "0")


# ------------------------------------------------------------------ counters and stats


def test_counters(w: World) -> None:
    c = w.connect()
    w.do(c, "delete 5")
    w.do(c, "delete x")
    w.do(c, "peek-ready")
    w.do(c, "peek-readyx")
    w.do(c, "put 0 0 1 70000")
    w.do(c, "pause-tube nosuch 1")
    st = w.stats(c)
    assert st["cmd-delete"] == "1"
    assert st["cmd-peek-ready"] == "1"
    assert st["cmd-put"] == "1"
    assert st["cmd-pause-tube"] == "1"
    # JOB_TOO_BIG does not make a producer.
    assert st["current-producers"] == "0"
    assert st["total-jobs"] == "0"
    w.put(c)
    w.do(c, "reserve-with-timeout 0")
    st = w.stats(c)
    assert (st["current-producers"], st["current-workers"], st["total-jobs"]) == ("1", "1", "1")
    assert (st["current-connections"], st["total-connections"]) == ("1", "1")
    assert list(st)[:6] == ["current-jobs-urgent", "current-jobs-ready",
                            "current-jobs-reserved", "current-jobs-delayed",
                            "current-jobs-buried", "cmd-put"]
    assert (st["version"], st["pid"], st["draining"]) == ('"1.12"', "1", "false")
    assert st["binlog-max-size"] == "10485760"


def test_urgent_and_state_counts(w: World) -> None:
    c = w.connect()
    w.put(c, pri=1023)
    w.put(c, pri=1024)
    w.put(c, delay=5)
    st = w.yaml(c, "stats-tube default")
    assert (st["current-jobs-urgent"], st["current-jobs-ready"]) == ("1", "2")
    assert st["current-jobs-delayed"] == "1"
    w.do(c, "reserve")
    st = w.stats(c)
    assert (st["current-jobs-urgent"], st["current-jobs-reserved"]) == ("0", "1")


def test_expected_crlf_and_draining_consume_ids(w: World) -> None:
    c = w.connect()
    assert commands.put_body(w.engine, c, p.Put(0, 0, 1, 1), b"xyz", w.clock.now) == (
        p.EXPECTED_CRLF)
    w.engine.draining = True
    assert w.do(c, "put 0 0 1 1", b"x") == p.DRAINING
    w.engine.draining = False
    assert w.put(c) == 3
    assert w.stats(c)["cmd-put"] == "3"


# ------------------------------------------------------------------ tubes


def test_tube_lifetime_and_list_order(w: World) -> None:
    c, d = w.connect(), w.connect()
    for name in ("a", "b", "c"):
        w.do(c, f"watch {name}")
    assert w.do(c, "ignore default") == p.render_watching(3)
    # 1.12 moves the last entry into the hole.
    assert w.do(c, "list-tubes-watched") == p.render_ok(b"---\n- c\n- a\n- b\n")
    w.do(d, "use a")
    w.put(d)
    w.do(c, "ignore a")
    w.do(d, "use default")
    # A job keeps tube a alive.
    assert w.yaml(c, "stats-tube a")["current-jobs-ready"] == "1"
    w.do(c, "pause-tube a 100")
    w.do(c, "reserve")
    w.do(c, "reserve-job 1")
    w.do(c, "delete 1")
    assert w.do(c, "stats-tube a") == p.NOT_FOUND
    assert w.do(c, "ignore nosuch") == p.render_watching(2)
    assert w.do(c, "stats-tube nosuch") == p.NOT_FOUND
    w.do(d, "use a")
    st = w.yaml(c, "stats-tube a")
    assert (st["pause"], st["total-jobs"], st["cmd-pause-tube"]) == ("0", "0", "0")


def test_ignore_last_tube(w: World) -> None:
    c = w.connect()
    assert w.do(c, "ignore default") == p.NOT_IGNORED
    assert w.do(c, "watch default") == p.render_watching(1)
    w.engine.disconnect(c, w.clock.now)
    assert w.yaml(w.connect(), "stats-tube default")["current-watching"] == "1"


def test_deleted_reserved_job_never_times_out(w: World) -> None:
    owner, waiter = w.connect(), w.connect()
    job = w.put(owner, ttr=2)
    assert w.reserved_id(w.do(owner, "reserve")) == job
    assert w.do(owner, f"delete {job}") == p.DELETED
    assert w.do(waiter, "reserve-with-timeout 10") is None
    w.advance(3)  # past the deleted job's TTR deadline
    assert w.deliveries() == []
    st = w.stats(owner)
    assert (st["job-timeouts"], st["current-jobs-ready"], st["current-waiting"]) == (
        "0", "0", "1")
    assert w.yaml(owner, "stats-tube default")["current-jobs-reserved"] == "0"


def test_deleted_delayed_job_leaves_no_live_alarm(w: World) -> None:
    c = w.connect()
    gone = w.put(c, delay=1)
    kept = w.put(c, delay=1)
    assert w.do(c, f"delete {gone}") == p.DELETED
    w.advance(2)  # the deleted job's delay alarm comes up: skipped, the other fires
    assert w.reserved_id(w.do(c, "reserve-with-timeout 0")) == kept
    assert w.stats(c)["current-jobs-delayed"] == "0"


def test_stale_alarms_of_deleted_jobs_are_compacted(w: World) -> None:
    c = w.connect()
    for _ in range(5000):
        w.put(c, ttr=600)
        job = w.reserved_id(w.do(c, "reserve"))
        assert w.do(c, f"delete {job}") == p.DELETED
    assert len(w.engine.alarms) < 2100


# ------------------------------------------------------------------ journal


def test_journal_sees_changes() -> None:
    j = RecordingJournal()
    w = World(j)
    c = w.connect()
    job = w.put(c)
    w.do(c, "reserve")
    w.do(c, f"bury {job} 0")
    w.do(c, f"kick-job {job}")
    w.do(c, f"delete {job}")
    assert j.log == [("put", job, "ready"), ("changed", job, "reserved"),
                     ("changed", job, "buried"), ("changed", job, "ready"),
                     ("deleted", job, "ready")]


def test_journal_failures_leave_state_unchanged() -> None:
    j = RecordingJournal()
    w = World(j)
    c = w.connect()
    job = w.put(c)
    w.do(c, "reserve")
    j.fail = True
    assert w.do(c, "put 0 0 1 1", b"x") == p.OUT_OF_MEMORY
    assert w.do(c, f"release {job} 5 5") == p.INTERNAL_ERROR
    assert w.do(c, f"bury {job} 5") == p.INTERNAL_ERROR
    assert w.do(c, f"delete {job}") == p.INTERNAL_ERROR
    st = w.yaml(c, f"stats-job {job}")
    assert (st["state"], st["pri"], st["releases"], st["buries"]) == ("reserved", "0", "0", "0")
    j.fail = False
    assert w.stats(c)["total-jobs"] == "1"
    # The refused put still consumed its id.
    assert w.put(c) == job + 2
    w.do(c, f"bury {job} 1")
    j.fail = True
    assert w.do(c, f"kick-job {job}") == p.INTERNAL_ERROR
    assert w.do(c, "kick 5") == p.render_kicked(0)
    assert w.yaml(c, f"stats-job {job}")["state"] == "buried"
    assert w.do(c, f"reserve-job {job}") == p.INTERNAL_ERROR
    assert w.do(c, "peek-buried") == p.render_found(job, b"job\r\n")


def test_restore_recovered_jobs(w: World) -> None:
    t = w.engine.default
    job = Job(41, t, 3, 0, 10, b"abc\r\n", w.clock.now)
    w.engine.restore(job, b"recovered", w.clock.now)
    c = w.connect()
    w.do(c, "watch recovered")
    assert w.reserved_id(w.do(c, "reserve")) == 41
    assert w.put(c) == 42


def test_ready_queue_survives_stale_entries_and_duplicates(w: World) -> None:
    c = w.connect()
    ids = [w.put(c, pri=i % 3) for i in range(300)]
    # Deleting ready jobs leaves stale entries; enough of them trigger a sweep.
    for job_id in ids[::2]:
        assert w.do(c, f"delete {job_id}") == p.DELETED
    # reserve-job + release puts a job back with the same key: a duplicate entry.
    survivor = ids[1]
    for _ in range(3):
        w.do(c, f"reserve-job {survivor}")
        w.do(c, f"release {survivor} 1 0")
    left = sorted(ids[1::2], key=lambda i: ((1 if i == survivor else (i - 1) % 3), i))
    assert w.yaml(c, "stats-tube default")["current-jobs-ready"] == str(len(left))
    assert w.do(c, "peek-ready") == p.render_found(left[0], b"job\r\n")
    # Stale entries were swept: the heap is not much bigger than the live queue.
    assert len(w.engine.default.ready.heap) <= len(left) + 65
    got = [w.reserved_id(w.do(c, "reserve-with-timeout 0")) for _ in range(len(left))]
    assert got == left
    assert w.do(c, "reserve-with-timeout 0") == p.TIMED_OUT


# ------------------------------------------------------------------ what comes first (#27)


def test_a_put_takes_its_id_at_its_line(w: World) -> None:
    early, late = w.connect(), w.connect()
    line = p.parse_command(b"put 0 0 60 1")
    assert isinstance(line, p.Put)
    assert commands.execute(w.engine, early, line, w.clock.now) is None  # its body comes later
    assert w.put(late, body=b"B") == 2
    w.clock.now += 3
    assert commands.put_body(w.engine, early, line, b"A\r\n", w.clock.now, True) == (
        b"INSERTED 1\r\n")
    assert w.yaml(late, "stats-job 1")["age"] == "3"  # created at its line, too
    # Equal priorities: the put begun first is reserved first.
    assert w.reserved_id(w.do(late, "reserve-with-timeout 0")) == 1


def test_a_closed_connection_uses_its_puts_id_up(w: World) -> None:
    gone, other = w.connect(), w.connect()
    line = p.parse_command(b"put 0 0 60 5")
    assert commands.execute(w.engine, gone, line, w.clock.now) is None
    w.engine.disconnect(gone, w.clock.now)
    assert w.put(other) == 2
    assert w.stats(other)["current-producers"] == "1"


def test_a_zero_pause_is_over_for_the_next_reserve(w: World) -> None:
    c = w.connect()
    w.put(c)
    assert w.do(c, "pause-tube default 0") == b"PAUSED\r\n"
    # No tick in between, as within one read.
    assert w.reserved_id(w.do(c, "reserve-with-timeout 0")) == 1


def test_a_pause_whose_time_came_serves_its_waiters_before_a_reserve(w: World) -> None:
    waiter, late = w.connect(), w.connect()
    w.put(waiter)
    w.do(waiter, "pause-tube default 5")
    assert w.do(waiter, "reserve") is None
    w.clock.now += 5  # the pause is due, its alarm not handled yet
    assert w.do(late, "reserve-with-timeout 0") == b"TIMED_OUT\r\n"
    assert [(s, w.reserved_id(r)) for s, r in w.deliveries()] == [(waiter, 1)]


def test_deadline_soon_beats_timed_out_beside_a_paused_ready_job(w: World) -> None:
    c = w.connect()
    w.put(c, ttr=1)
    w.reserved_id(w.do(c, "reserve-with-timeout 0"))
    w.do(c, "pause-tube default 5")
    w.put(c)
    assert w.do(c, "reserve-with-timeout 0") == b"DEADLINE_SOON\r\n"
    w.engine.tick(w.clock.now)
    assert w.deliveries() == []  # answered already, nothing left waiting
