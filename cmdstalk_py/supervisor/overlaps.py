"""Two pools of one config file serving one tube on one server: refused, since the tube's
jobs would be split between two commands.

A tube is shared when both pools list it, when one pool serves every tube (``all``), or
when one pool's glob matches a tube the other lists by name. Two globs may or may not meet,
depending on which tubes appear: allowed. The check indexes the names per server, so a file
of hundreds of pools with hundreds of tubes each is checked in about linear time: a glob
looks only at the names sharing its fixed start (or end), found by bisection.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from cmdstalk_py.supervisor.config import Config, is_glob

_Server = tuple[str, int]
_HIGHEST = chr(0x10FFFF)  # sorts after every character: the end of a prefix's range
_WILDCARD = re.compile(r"[*?[\]]")


@dataclass(frozen=True, slots=True)
class Overlap:
    """Pool ``later`` serves ``what`` (a tube, or every tube), as pool ``earlier`` does."""

    later: Config
    earlier: Config
    what: str


@dataclass
class _Index:
    """One server's pools (by their position in the file) and their tubes."""

    pools: list[int] = field(default_factory=list)
    all_tubes: list[int] = field(default_factory=list)
    # Name or glob -> its first pool; and its second, for the few listed twice. Plain
    # ints, not a list per tube: a file may list a hundred thousand tubes.
    names: dict[str, int] = field(default_factory=dict)
    globs: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, int] = field(default_factory=dict)

    def add(self, position: int, config: Config) -> None:
        self.pools.append(position)
        if config.all_tubes:
            self.all_tubes.append(position)
        for tube in config.tubes:
            first = (self.globs if is_glob(tube) else self.names).setdefault(tube, position)
            if first != position:
                self.seconds.setdefault(tube, position)

    def owners(self, name: str) -> tuple[int, ...]:
        """The first two pools listing ``name`` (a name, not a glob)."""
        second = self.seconds.get(name)
        return (self.names[name],) if second is None else (self.names[name], second)


# A clash as (later position, earlier position, what): the smallest is reported.
_Clash = tuple[int, int, str]


def first_overlap(configs: Sequence[Config]) -> Overlap | None:
    """The first pool (in file order) sharing a tube with an earlier one on some server,
    and the earliest such pool; None when every tube of every server has one pool."""
    servers: dict[_Server, _Index] = defaultdict(_Index)
    for position, config in enumerate(configs):
        for server in config.addresses:
            servers[server].add(position, config)
    clashes = [c for index in servers.values() for c in _clashes(index)]
    if not clashes:
        return None
    later, earlier, what = min(clashes, key=lambda c: (c[0], c[1]))
    return Overlap(configs[later], configs[earlier], what)


def _clashes(index: _Index) -> list[_Clash]:
    found: list[_Clash] = []
    if index.all_tubes and len(index.pools) > 1:
        # An `all` pool clashes with every other: the first one gives the earliest clash.
        first = index.all_tubes[0]
        other = index.pools[1] if index.pools[0] == first else index.pools[0]
        found.append(_ordered(first, other, "every tube (all)"))
    for name, second in index.seconds.items():  # the same name or the same glob, twice
        first = index.names[name] if name in index.names else index.globs[name]
        found.append((second, first, f"tube {name!r}"))
    found.extend(_glob_clashes(index))
    return found


def _glob_clashes(index: _Index) -> list[_Clash]:
    if not index.globs or not index.names:
        return []
    forward = sorted(index.names)
    backward = sorted(name[::-1] for name in index.names)
    found: list[_Clash] = []
    for glob, position in index.globs.items():
        # The glob's first pool suffices: a later one meets the first already.
        for name in _candidates(glob, forward, backward):
            if not fnmatch.fnmatchcase(name, glob):
                continue
            other = next((p for p in index.owners(name) if p != position), None)
            if other is not None:
                found.append(_ordered(position, other, f"tube {name!r}"))
    return found


def _candidates(glob: str, forward: list[str], backward: list[str]) -> list[str]:
    """The names that could match ``glob``: those with its fixed start, or with its fixed
    end, whichever are fewer."""
    parts = _WILDCARD.split(glob)
    start, end = parts[0], parts[-1][::-1]
    by_start = _range(forward, start)
    by_end = _range(backward, end)
    if by_start[1] - by_start[0] <= by_end[1] - by_end[0]:
        return forward[by_start[0] : by_start[1]]
    return [name[::-1] for name in backward[by_end[0] : by_end[1]]]


def _range(names: list[str], prefix: str) -> tuple[int, int]:
    return bisect.bisect_left(names, prefix), bisect.bisect_left(names, prefix + _HIGHEST)


def _ordered(a: int, b: int, what: str) -> _Clash:
    return (max(a, b), min(a, b), what)
