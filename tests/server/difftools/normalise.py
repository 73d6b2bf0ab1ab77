"""Turning replies into comparable text, and comparing two transcripts.

What is normalised, and why (everything else must be byte-identical):
* job ids become ``#1``, ``#2`` … by order of first appearance on that server (the
  issue's rule; scenarios that care about exact ids assert them literally);
* ``stats``: ``pid``, ``version``, ``uptime``, ``rusage-utime``, ``rusage-stime``, ``id``,
  ``hostname``, ``os``, ``platform`` are per-process facts, shown as ``<…>``; the
  ``cmd-*`` counters have the harness's own hidden polls subtracted;
* ``age``, ``time-left`` (stats-job) and ``pause-time-left`` (stats-tube) are whole
  seconds counted from instants that the two servers see a few milliseconds apart, so a
  truncation can land on either side of a second: they compare equal within 1;
* ``OK <bytes>``: the count is checked against the chunk when reading; the normalised
  text shows the body instead, since e.g. a longer pid changes it legitimately;
* ``list-tubes``/``list-tubes-watched`` bodies are sorted: the protocol leaves the order
  unspecified (1.12's order comes from swap-removal in an array, §7.4).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from tests.server.difftools import wire

PER_PROCESS = frozenset(
    ["pid", "version", "uptime", "rusage-utime", "rusage-stime", "hostname", "os", "platform"]
)
TOLERANT = frozenset(["age", "time-left", "pause-time-left"])
_ID_LINE = re.compile(rb"(INSERTED|BURIED|RESERVED|FOUND) (\d+)(.*)")
_TOL = re.compile(r"~(-?\d+)")


@dataclass
class IdBook:
    """Raw job ids in order of first appearance."""

    order: list[int] = field(default_factory=list)
    last: int | None = None  # the id most recently seen, first appearance or not

    def label(self, raw: int) -> str:
        self.last = raw
        if raw not in self.order:
            self.order.append(raw)
        return f"#{self.order.index(raw) + 1}"

    def raw(self, n: int) -> int | None:
        return self.order[n - 1] if 0 < n <= len(self.order) else None


def stats_kind(doc: dict[str, str]) -> str:
    if "current-jobs-urgent" in doc and "name" not in doc:
        return "stats"
    if "name" in doc:
        return "stats-tube"
    if "tube" in doc:
        return "stats-job"
    return "unknown"


def normalise_yaml(
    body: bytes, ids: IdBook, hidden: Counter[str]
) -> tuple[str, dict[str, str] | list[str]]:
    """(normalised text, normalised parsed document) of a YAML data chunk."""
    doc = wire.parse_yaml(body)
    if isinstance(doc, list):
        names = sorted(doc)
        return "---\n" + "".join(f"- {n}\n" for n in names), names
    kind = stats_kind(doc)
    out: dict[str, str] = {}
    for key, value in doc.items():
        if kind == "stats" and (key in PER_PROCESS or key == "id"):
            value = f"<{key}>"
        elif kind == "stats" and key in hidden:
            value = str(int(value) - hidden[key])
        elif kind == "stats-job" and key == "id" and value.isdigit():
            value = ids.label(int(value))
        elif key in TOLERANT:
            value = f"~{value}"
        out[key] = value
    return "---\n" + "".join(f"{k}: {v}\n" for k, v in out.items()), out


def render(ev: wire.Event, ids: IdBook, hidden: Counter[str]) -> str:
    """The normalised text of one event."""
    if isinstance(ev, wire.Eof):
        return "<eof>" + (f" after {ev.extra!r}" if ev.extra else "")
    if isinstance(ev, wire.Timeout):
        return "<no reply>" + (f" partial {ev.partial!r}" if ev.partial else "")
    if isinstance(ev, wire.Malformed):
        return f"<malformed: {ev.why}: {ev.raw[:300]!r}>"
    line = ev.line
    m = _ID_LINE.fullmatch(line)
    text = (
        f"{m.group(1).decode()} {ids.label(int(m.group(2)))}{m.group(3).decode('latin-1')}"
        if m
        else line.decode("latin-1")
    )
    if ev.data is None:
        return text
    if line.startswith(b"OK "):
        return "OK\n" + normalise_yaml(ev.data, ids, hidden)[0]
    return f"{text}\n{ev.data!r}"


def same(a: str, b: str) -> bool:
    """Equal, except that ``~N`` numbers may differ by one."""
    if a == b:
        return True
    pa, pb = _TOL.split(a), _TOL.split(b)
    if len(pa) != len(pb):
        return False
    for i, (x, y) in enumerate(zip(pa, pb, strict=True)):
        if i % 2 == 0:
            if x != y:
                return False
        elif abs(int(x) - int(y)) > 1:
            return False
    return True


def same_transcripts(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and same(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )


def _line_diff(x: str, y: str) -> str:
    """For two multi-line entries: only the lines that differ."""
    xl, yl = x.split("\n"), y.split("\n")
    if len(xl) != len(yl):
        return f"{x!r}  ||  {y!r}"
    return "; ".join(f"{a} || {b}" for a, b in zip(xl, yl, strict=True) if not same(a, b))


def side_by_side(
    a: list[tuple[str, str]], b: list[tuple[str, str]], a_name: str, b_name: str
) -> str:
    """A readable listing of two transcripts, marking the entries that differ."""
    out = [f"    {'conn':<6}{a_name}  ||  {b_name}"]
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else ("", "<missing>")
        y = b[i] if i < len(b) else ("", "<missing>")
        xs, ys = x[1].replace("\n", "\\n"), y[1].replace("\n", "\\n")
        if x[0] == y[0] and same(x[1], y[1]):
            out.append(f"    {x[0]:<6}{xs if len(xs) < 60 else xs[:57] + '...'}")
        elif "\n" in x[1] and "\n" in y[1] and x[0] == y[0]:
            out.append(f"!!  {x[0]:<6}{x[1].split(chr(10))[0]} differs in: "
                       + _line_diff(x[1], y[1]))
        else:
            out.append(f"!!  {x[0]:<6}{xs}  ||  {y[0]}: {ys}")
    return "\n".join(out)
