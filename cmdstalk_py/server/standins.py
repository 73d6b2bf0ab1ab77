"""``typing.NamedTuple`` and ``enum.Enum`` for the server's own classes, at a fraction of
their import cost.

``cmdstalk-server`` must answer its first command within a couple of interpreter start-up
times (test suites spawn a server per test), and ``typing``, ``enum`` and what they load
were most of what it imported on its own. The modules on the serving path write::

    if TYPE_CHECKING:
        from enum import Enum
        from typing import NamedTuple
    else:
        from cmdstalk_py.server.standins import Enum, NamedTuple

so mypy checks the very ``NamedTuple`` and ``Enum`` classes, while at run time the same
class bodies build these: a tuple subclass with named fields, defaults, ``_fields``,
``_replace`` and the usual repr; an enum whose members are instances with ``name`` and
``value``, compared by identity, iterable in definition order and looked up by value.
Nothing else of the two modules' behaviour is relied on.
"""

from __future__ import annotations

from _operator import itemgetter

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Iterator

_NEW = tuple.__new__
# Class-body entries that are not fields or members.
_IGNORED = frozenset(("__annotations__", "__module__", "__qualname__", "__doc__"))


def _tuple_repr(self: tuple[object, ...]) -> str:
    fields: tuple[str, ...] = type(self)._fields  # type: ignore[attr-defined]
    pairs = ", ".join(f"{f}={v!r}" for f, v in zip(fields, self, strict=True))
    return f"{type(self).__name__}({pairs})"


def _tuple_replace(self: tuple[object, ...], **changes: object) -> tuple[object, ...]:
    fields: tuple[str, ...] = type(self)._fields  # type: ignore[attr-defined]
    values = [changes.pop(f, v) for f, v in zip(fields, self, strict=True)]
    if changes:
        raise TypeError(f"unknown fields {sorted(changes)!r}")
    return _NEW(type(self), values)


def _tuple_args(self: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(self)


class _NamedTupleMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, object]) -> type:
        annotations = ns.get("__annotations__", {})
        assert isinstance(annotations, dict)
        fields = tuple(annotations)
        defaults = {f: ns[f] for f in fields if f in ns}
        body: dict[str, object] = {k: v for k, v in ns.items() if k not in defaults}
        body.update(
            __slots__=(), _fields=fields, _field_defaults=defaults, __match_args__=fields,
            __new__=_tuple_new(fields, defaults), __repr__=_tuple_repr,
            _replace=_tuple_replace, __getnewargs__=_tuple_args,
        )
        for i, f in enumerate(fields):
            body[f] = property(itemgetter(i), doc=f"Field {i}: {f}")
        return type.__new__(type, name, (tuple,), body)


def _tuple_new(fields: tuple[str, ...], defaults: dict[str, object]) -> object:
    count = len(fields)

    def __new__(cls: type, *args: object, **kwargs: object) -> tuple[object, ...]:
        if len(args) == count and not kwargs:
            return _NEW(cls, args)
        values = list(args)
        for f in fields[len(args):]:
            if f in kwargs:
                values.append(kwargs.pop(f))
            elif f in defaults:
                values.append(defaults[f])
            else:
                raise TypeError(f"{cls.__name__}() missing argument {f!r}")
        if kwargs or len(values) != count:
            raise TypeError(f"{cls.__name__}() takes {count} arguments ({args!r}, {kwargs!r})")
        return _NEW(cls, values)

    return staticmethod(__new__)


#: The base class: ``class Put(NamedTuple): pri: int ...``.
NamedTuple = type.__new__(_NamedTupleMeta, "NamedTuple", (), {"__module__": __name__})


def _behaviour(value: object) -> bool:
    return callable(value) or isinstance(value, property | classmethod | staticmethod)


class _EnumMeta(type):
    _members: dict[str, Enum]

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, object]) -> type:
        members = {k: v for k, v in ns.items() if not (k.startswith("_") or _behaviour(v))}
        body = {k: v for k, v in ns.items() if k not in members}
        cls = type.__new__(mcs, name, bases, body)
        cls._members = {}
        for key, value in members.items():
            member: Enum = Enum.__new__(cls)  # type: ignore[arg-type]  # cls is an Enum class
            member.name, member.value = key, value
            cls._members[key] = member
            setattr(cls, key, member)
        return cls

    def __iter__(cls) -> Iterator[Enum]:
        return iter(cls._members.values())

    def __len__(cls) -> int:
        return len(cls._members)

    def __call__(cls, value: object) -> Enum:
        for member in cls._members.values():
            if member.value == value:
                return member
        raise ValueError(f"{value!r} is not a valid {cls.__name__}")

    def __getitem__(cls, name: str) -> Enum:
        return cls._members[name]


class Enum(metaclass=_EnumMeta):
    """The base class: ``class State(Enum): OPEN = "open" ...``."""

    __slots__ = ("name", "value")
    name: str
    value: object

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple[object, tuple[object]]:
        return type(self), (self.value,)
