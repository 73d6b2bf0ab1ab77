"""Per-tube limits and rates as pure rules on a clock driven by hand (``gate.py``), and
their command-line spellings."""

from __future__ import annotations

import math

import pytest

from cmdstalk_py.supervisor.cli import command, normalize_args
from cmdstalk_py.supervisor.config import parse_rate, parse_tube_limits, parse_tube_rates
from cmdstalk_py.supervisor.discovery import abandoned, selector
from cmdstalk_py.supervisor.gate import Gate, TokenBucket, hold_reason, servable


def test_token_bucket_refills_up_to_its_burst() -> None:
    bucket = TokenBucket.full(rate=2.0, burst=3.0, now=0.0)
    assert bucket.available(0.0) == 3.0
    for _ in range(3):
        bucket.take(0.0)
    assert bucket.available(0.0) == 0.0
    assert bucket.time_until(1, 0.0) == pytest.approx(0.5)
    assert bucket.available(0.25) == pytest.approx(0.5)
    assert bucket.available(100.0) == 3.0  # never more than the burst
    assert math.isinf(bucket.time_until(4, 0.0))


def test_the_watch_set_rule() -> None:
    assert servable(running=0, claims=0, limit=None, tokens=None)
    assert servable(running=1, claims=0, limit=2, tokens=None)
    assert not servable(running=1, claims=1, limit=2, tokens=None)  # one waits already
    assert not servable(running=2, claims=0, limit=2, tokens=None)
    assert servable(running=0, claims=1, limit=None, tokens=2.0)
    assert not servable(running=0, claims=2, limit=None, tokens=2.5)
    assert hold_reason(2, 0, 2, None) == "limit"
    assert hold_reason(0, 0, None, 0.5) == "rate"
    assert hold_reason(0, 0, 3, 1.0) is None


def test_claims_never_exceed_a_limit_and_other_tubes_stay_served() -> None:
    gate = Gate({"img": 2}, {}, now=0.0)
    sets = [gate.claim(w, 0, ("img", "mail"), 0.0) for w in range(4)]
    assert sets == [("img", "mail"), ("img", "mail"), ("mail",), ("mail",)]
    gate.started(0, "img", 0.0)  # worker 0 got an img job; worker 1 still waits on img
    assert gate.claim(2, 0, ("img", "mail"), 0.0) == ("mail",)
    gate.finished("img", 1.0)
    assert gate.claim(0, 0, ("img", "mail"), 1.0) == ("img", "mail")
    assert gate.running["img"] == 0  # workers 0 and 1 claim both slots, none runs


def test_a_rate_holds_a_tube_back_until_its_next_token() -> None:
    gate = Gate({}, {"r": (2.0, 1.0)}, now=0.0)
    assert gate.claim("a", 0, ("r",), 0.0) == ("r",)
    assert gate.claim("b", 0, ("r",), 0.0) == ()  # the one token is claimed by a
    gate.started("a", "r", 0.0)
    assert gate.claim("a", 0, ("r",), 0.0) == ()
    assert gate.wakes({0: ("r",)}, 0.0)[1] == pytest.approx(0.5)
    assert gate.claim("b", 0, ("r",), 0.5) == ("r",)


def test_wakes_names_a_servable_tube_nobody_waits_on_once() -> None:
    gate = Gate({}, {"r": (1.0, 1.0)}, now=0.0)
    assert gate.claim("a", 0, ("r", "u"), 0.0) == ("r", "u")
    gate.started("a", "r", 0.0)
    assert gate.claim("a", 0, ("r", "u"), 0.1) == ("u",)  # r is out of tokens
    early, due = gate.wakes({0: ("r", "u")}, 0.5)
    assert early == [] and due == pytest.approx(0.5)
    wakes, _ = gate.wakes({0: ("r", "u")}, 1.0)
    assert wakes == [(0, "r")]
    assert gate.wakes({0: ("r", "u")}, 1.0)[0] == []  # asked once until someone claims
    assert gate.claim("a", 0, ("r", "u"), 1.0) == ("r", "u")


def test_a_waiting_worker_is_woken_by_the_next_change() -> None:
    gate = Gate({"l": 1}, {}, now=0.0)
    gate.claim("a", 0, ("l",), 0.0)
    gate.started("a", "l", 0.0)
    assert gate.claim("b", 0, ("l",), 0.0) == ()
    woken: list[str] = []
    # Nothing servable and no rate: only a change can help (no timeout).
    assert gate.next_change(("l",), 0.0, lambda: woken.append("b")) == math.inf
    assert woken == []
    gate.finished("l", 0.0)  # notifies (a finished job frees the slot)
    assert woken == ["b"]
    gate.finished("l", 0.0)
    assert woken == ["b"], "a wake-up is called once"
    assert gate.claim("b", 0, ("l",), 0.0) == ("l",)


def test_a_worker_asking_after_the_change_does_not_wait() -> None:
    gate = Gate({"l": 1}, {}, now=0.0)
    gate.claim("a", 0, ("l",), 0.0)
    gate.started("a", "l", 0.0)
    assert gate.claim("b", 0, ("l",), 0.0) == ()
    gate.finished("l", 0.0)  # before b asks: its notify reached nobody
    assert gate.next_change(("l",), 0.0, lambda: None) is None  # servable: no wait


def test_a_rate_held_worker_waits_until_the_next_token() -> None:
    gate = Gate({}, {"r": (2.0, 1.0)}, now=0.0)
    gate.claim("a", 0, ("r",), 0.0)
    gate.started("a", "r", 0.0)  # the one token is spent
    assert gate.claim("b", 0, ("r",), 0.0) == ()
    assert gate.next_change(("r",), 0.0, lambda: None) == pytest.approx(0.5)


def test_held_and_servable_are_reported_once_each() -> None:
    seen: list[tuple[str, str | None]] = []
    gate = Gate({"l": 1}, {}, now=0.0, on_change=lambda t, r: seen.append((t, r)))
    gate.claim("a", 0, ("l",), 0.0)
    gate.started("a", "l", 0.0)
    gate.claim("b", 0, ("l",), 0.0)
    gate.finished("l", 1.0)
    assert seen == [("l", "limit"), ("l", None)]


def test_a_reload_that_lifts_the_limit_of_a_held_tube_reports_it_servable() -> None:
    seen: list[tuple[str, str | None]] = []
    gate = Gate({"l": 1, "k": 1}, {}, now=0.0, on_change=lambda t, r: seen.append((t, r)))
    gate.claim("a", 0, ("l",), 0.0)
    gate.started("a", "l", 0.0)
    gate.claim("b", 0, ("l",), 0.0)
    assert seen == [("l", "limit")]
    gate.reconfigure({"k": 1}, {}, 1.0)  # l's limit is gone; k keeps its own
    assert seen == [("l", "limit"), ("l", None)]
    gate.reconfigure({"k": 1}, {}, 2.0)
    assert seen == [("l", "limit"), ("l", None)]  # once


def test_parsers() -> None:
    assert parse_tube_limits(["img=2", "mail=1", "img=3"]) == (("img", 3), ("mail", 1))
    assert parse_rate("5/s") == (5.0, 5.0)
    assert parse_rate("5/s:10") == (5.0, 10.0)
    assert parse_rate("30/m") == (0.5, 1.0)
    assert parse_tube_rates(["img=120/h:2"]) == (("img", 120 / 3600, 2.0),)
    for bad in ["img", "img=0", "=2", "img=x"]:
        with pytest.raises(ValueError):
            parse_tube_limits([bad])
    for bad in ["5", "5/d", "0/s", "-1/s", "5/s:0", "nan/s", "inf/s"]:
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_pool_flags_in_go_and_gnu_spellings() -> None:
    for args in (
        ["-cmd=x", "-workers=3", "-tube-limit=img=2", "-tube-rate", "img=5/s:10",
         "-address=a:1,b:2", "-tubes=img,mail.*"],
        ["--cmd", "x", "--workers", "3", "--tube-limit", "img=2", "--tube-rate=img=5/s:10",
         "--address", "a:1,b:2", "--tubes", "img,mail.*"],
    ):  # fmt: skip
        p = command.make_context("cmdstalk", normalize_args(args)).params
        assert p["workers"] == 3
        assert p["tube_limits"] == (("img", 2),)
        assert p["tube_rates"] == (("img", 5.0, 10.0),)
        assert p["address"] == (("a", 1), ("b", 2))
        assert p["tubes"] == ("img", "mail.*")


def test_discovery_rules() -> None:
    picks = selector(("mail.*", "jobs", "q[12]"), all_tubes=False)
    names = ("mail.a", "mail", "jobs", "q1", "q3")
    assert [n for n in names if picks(n)] == ["mail.a", "jobs", "q1"]
    assert selector((), all_tubes=True)("anything")
    empty = {"current-jobs-ready": 0, "current-jobs-reserved": 0, "current-jobs-delayed": 0,
             "current-jobs-buried": 0, "current-using": 0, "current-watching": 2}  # fmt: skip
    assert abandoned(empty, ours=2)
    assert not abandoned(empty, ours=1)  # someone else watches it
    assert not abandoned({**empty, "current-using": 1}, ours=2)  # a producer uses it
    assert not abandoned({**empty, "current-jobs-delayed": 1}, ours=2)


def test_workers_and_per_tube_together_are_a_usage_error() -> None:
    from click.testing import CliRunner

    run = CliRunner().invoke(command, ["--cmd", "x", "--workers", "2", "--per-tube", "3"])
    assert run.exit_code == 2
    assert "give --workers (shared by all tubes) or --per-tube, not both" in run.output
