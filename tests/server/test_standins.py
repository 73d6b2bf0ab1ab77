"""The run-time stand-ins for ``typing.NamedTuple`` and ``enum.Enum`` behave like them in
everything the server relies on: each test builds the same class body both ways."""

from __future__ import annotations

import copy
import enum
import pickle
import typing
from typing import Any

import pytest

from cmdstalk_py.server import standins, verbs
from cmdstalk_py.server.conn_state import State


def record_classes(base: Any) -> tuple[Any, Any]:
    class Point(base):  # type: ignore[misc]
        """A point."""

        x: int
        y: int = 0

        def norm(self) -> int:
            return abs(self.x) + abs(self.y)

    class Empty(base):  # type: ignore[misc]
        """Nothing."""

    return Point, Empty


BOTH = [typing.NamedTuple, standins.NamedTuple]


@pytest.mark.parametrize("base", BOTH, ids=["typing", "standin"])
def test_named_tuple_fields_defaults_and_methods(base: Any) -> None:
    point, empty = record_classes(base)
    p: Any = point(3, y=-4)
    assert (p, p.x, p.y, p.norm(), point(1)) == ((3, -4), 3, -4, 7, (1, 0))
    assert point._fields == ("x", "y") and tuple in point.__mro__
    assert point.__doc__ == "A point."
    assert repr(p) == "Point(x=3, y=-4)" and repr(empty()) == "Empty()"
    assert p._replace(y=5) == point(3, 5) and type(p._replace(y=5)) is point
    assert copy.copy(p) == p and copy.deepcopy(p) == p
    assert tuple.__new__(point, (1, 2)).y == 2
    assert hash(p) == hash((3, -4)) and p == (3, -4)
    for bad in ((), (1, 2, 3)):
        with pytest.raises(TypeError):
            point(*bad)
    with pytest.raises(TypeError):
        point(1, z=2)


def enum_class(base: Any) -> Any:
    class Light(base):  # type: ignore[misc]
        """A traffic light."""

        RED = "red"
        AMBER = "amber"  # a comment, not a member
        GREEN = "green"

    return Light


@pytest.mark.parametrize("base", [enum.Enum, standins.Enum], ids=["enum", "standin"])
def test_enum_members(base: Any) -> None:
    light = enum_class(base)
    red = light.RED
    assert [m.name for m in light] == ["RED", "AMBER", "GREEN"] and len(light) == 3
    assert (red.name, red.value) == ("RED", "red")
    assert light("amber") is light.AMBER and light["GREEN"] is light.GREEN
    assert isinstance(red, light) and red is not light.GREEN and red != light.GREEN
    assert {red: 1}[light.RED] == 1
    assert repr(red) == "<Light.RED: 'red'>" and str(red) == "Light.RED"
    assert copy.copy(red) is red
    with pytest.raises(ValueError):
        light("blue")


def test_the_server_uses_the_standins() -> None:
    # The serving path loads neither typing nor enum (tests/server/test_startup.py).
    assert type(State.OPEN).__mro__[1] is standins.Enum
    assert verbs.Put._fields == ("pri", "delay", "ttr", "size")
    assert verbs.Rejected(b"X") == (b"X", None, 0)
    put = verbs.Put(0, 0, 60, 5)
    assert pickle.loads(pickle.dumps(put)) == put
    assert pickle.loads(pickle.dumps(State.OPEN)) is State.OPEN
