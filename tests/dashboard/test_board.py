"""``Board`` as brokers drive it: the hook order a pipelining broker really produces."""

from __future__ import annotations

from cmdstalk_py.ops.dashboard.board import LINES, Board
from cmdstalk_py.ops.observers import JobStart, Observer, Observers
from cmdstalk_py.supervisor.results import JobResult, Outcome


def result(job_id: int, outcome: Outcome, ended_at: float, stderr: str = "") -> JobResult:
    return JobResult(
        job_id=job_id, tube="work", slot=0, outcome=outcome, started_at=ended_at - 1,
        ended_at=ended_at, priority=0, ttr=60, releases=0, timeouts=0, reserves=1, age_s=0,
        payload_bytes=1, exit_code=0 if outcome is Outcome.DELETED else 3, stderr_tail=stderr,
    )  # fmt: skip


def start(job_id: int, pid: int, ttr: int, at: float) -> JobStart:
    return JobStart("mail", "work", 0, "work", job_id, pid, ttr, at, float(ttr), "ttr")


def test_a_late_report_does_not_hide_the_next_running_job() -> None:
    now = [100.0]
    board = Board(clock=lambda: now[0])
    hooks = Observers([board])
    hooks.job_started(start(1, 4242, 60, 99.0))
    hooks.job_output("work", 0, 1, "stdout", b"\x1b[31mone\xff\n")
    hooks.broker_busy("work", 0, False)
    # A pipelining broker reports job 1 once job 2 has started.
    hooks.job_started(start(2, 4243, 30, 100.0))
    hooks.job_output("work", 0, 1, "stdout", b"late line of job 1")  # not job 2's
    hooks.job_finished(result(1, Outcome.DELETED, 100.0))
    now[0] = 102.5
    running = board.running()
    assert [(j["pool"], j["job_id"], j["pid"], j["elapsed"], j["output"]) for j in running] == [
        ("mail", 2, 4243, 2.5, [])
    ]
    for n in range(LINES + 5):
        hooks.job_output("work", 0, 2, "stderr", b"line %d" % n)
    assert board.running()[0]["output"][-1] == f"line {LINES + 4}"
    assert len(board.running()[0]["output"]) == LINES


def test_failures_first_newest_first() -> None:
    board = Board()
    board.job_finished(result(1, Outcome.BURIED, 1.0, "old failure\n"))
    board.job_finished(result(2, Outcome.DELETED, 2.0))
    board.job_finished(result(3, Outcome.RELEASED, 3.0, "a\nb\nlast\n"))
    board.job_finished(result(4, Outcome.DELETED, 4.0))
    finished = board.finished()
    assert [f["job_id"] for f in finished] == [3, 1, 4, 2]
    assert finished[0]["stderr_tail"] == ["a", "b", "last"]


def test_observers_tell_who_listens_for_output() -> None:
    assert not Observers([Observer()]).listens("job_output")
    assert Observers([Observer(), Board()]).listens("job_output")
    assert Board().listens("job_output") and not Observer().listens("job_output")


def test_a_running_job_names_its_server() -> None:
    board = Board(clock=lambda: 100.0)
    board.job_started(
        JobStart("mail", "work", 3, "work", 7, 4242, 60, 99.0, 60.0, "ttr", "10.0.0.2:11300")
    )
    assert [(j["job_id"], j["server"], j["slot"]) for j in board.running()] == [
        (7, "10.0.0.2:11300", 3)
    ]
