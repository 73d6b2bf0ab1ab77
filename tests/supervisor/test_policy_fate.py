"""policy.py for issue #19: exit-code actions, the timeout policy, jitter, command requests,
and the reason behind every decision. Pure functions, no server."""

from __future__ import annotations

import random
from typing import Any

import pytest

from cmdstalk_py.supervisor.config import parse_on_exit, parse_on_timeout
from cmdstalk_py.supervisor.policy import (
    Decision,
    Request,
    backoff_delay,
    exit_rules,
    full_jitter,
    precheck,
)
from cmdstalk_py.supervisor.results import Outcome, Reason
from tests.supervisor.test_policy import decide_job


def _decide(exit_code: int | None, releases: int = 2, **kw: object) -> Decision:
    return decide_job(exit_code, releases, **kw)


def _fate(d: Decision) -> tuple[Outcome, int | None, Reason | None]:
    return d.outcome, d.delay, d.reason


RULES = parse_on_exit(["3=delete", "4=release", "5=backoff", "6=bury", "64-66=bury"])


@pytest.mark.parametrize(
    ("code", "fate"),
    [
        (3, (Outcome.DELETED, None, Reason.ON_EXIT)),
        (4, (Outcome.RELEASED, 0, Reason.ON_EXIT)),
        (5, (Outcome.RELEASED, 16, Reason.ON_EXIT)),
        (6, (Outcome.BURIED, None, Reason.ON_EXIT)),
        (65, (Outcome.BURIED, None, Reason.ON_EXIT)),
        (7, (Outcome.RELEASED, 16, Reason.EXIT_CODE)),  # no rule: the curve, as before
        (0, (Outcome.DELETED, None, Reason.EXIT_CODE)),  # defaults unchanged
    ],
)
def test_every_exit_action(code: int, fate: tuple[Outcome, int | None, Reason]) -> None:
    assert _fate(_decide(code, on_exit=RULES)) == fate


def test_exit_rules_table_and_bury_exit_codes_shorthand() -> None:
    assert _fate(_decide(78, bury_exit_codes=frozenset({78}))) == (
        Outcome.BURIED, None, Reason.ON_EXIT,
    )  # fmt: skip
    # --on-exit is more specific than the shorthand: it wins for a code both name.
    rules = exit_rules(parse_on_exit(["78=release"]), frozenset({78, 65}))
    assert {c: a.value for c, a in rules.items()} == {65: "bury", 78: "release"}
    # A rule may even change what exit 0 does.
    assert _decide(0, on_exit=parse_on_exit(["0=bury"])).outcome is Outcome.BURIED


def test_parse_on_exit_forms_and_errors() -> None:
    assert parse_on_exit(["75=release", "3=BURY 3=delete", "10-11=backoff"]) == (
        (3, "delete"), (10, "backoff"), (11, "backoff"), (75, "release"),
    )  # fmt: skip
    assert parse_on_exit([]) == ()
    for bad in ("3", "x=bury", "3=nope", "300=bury", "5-2=bury", "=bury", "-1=bury"):
        with pytest.raises(ValueError):
            parse_on_exit([bad])
    assert parse_on_timeout(" Release ") == "release"
    with pytest.raises(ValueError, match="bury or release"):
        parse_on_timeout("delete")


def test_timeout_policy_bury_is_the_default() -> None:
    assert _fate(_decide(None, ttr_killed=True)) == (Outcome.TIMEOUT_BURIED, None, Reason.TTR)
    d = _decide(None, ttr_killed=True, killed_by=Reason.MAX_RUNTIME)
    assert _fate(d) == (Outcome.TIMEOUT_BURIED, None, Reason.MAX_RUNTIME)


def test_timeout_policy_release_until_max_timeouts_then_bury() -> None:
    kw: dict[str, Any] = {"ttr_killed": True, "on_timeout": "release", "max_timeouts": 3}
    assert _fate(_decide(None, timeouts=1, **kw)) == (Outcome.RELEASED, 16, Reason.TTR)
    d = _decide(None, timeouts=2, killed_by=Reason.MAX_RUNTIME, **kw)
    assert _fate(d) == (Outcome.RELEASED, 16, Reason.MAX_RUNTIME)
    assert _fate(_decide(None, timeouts=3, **kw)) == (
        Outcome.TIMEOUT_BURIED, None, Reason.MAX_TIMEOUTS,
    )  # fmt: skip
    # Shutdown still comes first: a deadline kill while stopping is released at once.
    assert _fate(_decide(None, stopping=True, timeouts=9, **kw)) == (
        Outcome.SHUTDOWN_RELEASED, 0, Reason.SHUTDOWN,
    )  # fmt: skip


def test_command_request_wins_on_failure_only() -> None:
    retry = Request(retry_after=7)
    assert _fate(_decide(1, request=retry)) == (Outcome.RELEASED, 7, Reason.COMMAND_REQUEST)
    assert _fate(_decide(6, request=retry, on_exit=RULES)) == (
        Outcome.RELEASED, 7, Reason.COMMAND_REQUEST,
    )  # fmt: skip
    assert _fate(_decide(None, signaled=True, request=Request(bury=True))) == (
        Outcome.BURIED, None, Reason.COMMAND_REQUEST,
    )  # fmt: skip
    assert _decide(0, request=Request(bury=True)).outcome is Outcome.DELETED
    # A deadline kill is not the command's call.
    assert _decide(None, ttr_killed=True, request=retry).outcome is Outcome.TIMEOUT_BURIED
    assert _decide(1, request=Request(retry_after=2**40)).delay == 2**32 - 1


def test_reasons_of_signals_failed_starts_and_precheck() -> None:
    assert _decide(None, signaled=True).reason is Reason.SIGNAL
    assert _decide(None).reason is Reason.NOT_STARTED
    assert _decide(None, shutdown_killed=True).reason is Reason.SHUTDOWN
    t = precheck(0, 1, 0, max_releases=10, max_timeouts=1)
    r = precheck(10, 0, 0, max_releases=10, max_timeouts=1)
    assert t is not None and t.reason is Reason.MAX_TIMEOUTS
    assert r is not None and r.reason is Reason.MAX_RELEASES


def test_full_jitter_stays_within_the_curve_over_many_draws() -> None:
    rng = random.Random(19)
    for releases in range(12):
        curve = backoff_delay(releases, 4.0, 3600)
        draws = [full_jitter(curve, rng) for _ in range(2000)]
        assert all(0 <= d <= curve <= 3600 for d in draws)
        if curve >= 16:
            # Spread out, not clumped: both ends of the range are reached.
            assert min(draws) <= curve // 10 and max(draws) >= curve - curve // 10
            assert len(set(draws)) > min(curve, 2000) // 4
    assert full_jitter(0, rng) == 0


def test_jitter_applies_to_every_curve_release_and_only_those() -> None:
    rng = random.Random(7)
    delays = {_decide(1, releases=3, rng=rng, backoff_max=60).delay for _ in range(500)}
    assert delays <= set(range(61)) and len(delays) > 30
    d = _decide(4, releases=3, rng=rng, on_exit=RULES)  # release: no delay, no jitter
    assert d.delay == 0
    assert _decide(1, releases=3, rng=rng, request=Request(retry_after=7)).delay == 7
