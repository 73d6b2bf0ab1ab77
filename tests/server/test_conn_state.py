"""The server connection's lifecycle table (``conn_state``)."""

from __future__ import annotations

from cmdstalk_py.server.conn_state import TRANSITIONS, State


def test_every_state_has_its_row_and_none_loops_to_itself() -> None:
    assert set(TRANSITIONS) == set(State)
    for state, targets in TRANSITIONS.items():
        assert state not in targets


def test_every_state_can_close_and_closed_is_final() -> None:
    assert TRANSITIONS[State.CLOSED] == frozenset()
    for state in State:
        if state is not State.CLOSED:
            assert State.CLOSED in TRANSITIONS[state], state


def test_only_waiting_goes_back_to_open() -> None:
    assert [s for s in State if State.OPEN in TRANSITIONS[s]] == [State.WAITING]
    # Once closing or broken, a connection never runs commands again.
    for state in (State.CLOSING, State.BROKEN):
        assert TRANSITIONS[state] <= {State.BROKEN, State.CLOSED}
