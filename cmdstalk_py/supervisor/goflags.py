"""Go ``flag`` spellings for click: ``-address=x``, ``-all``, ``-per-tube 6``, ``-all=false``.

Go's flag package accepts one or two dashes for every flag, ``=value`` or a separate value,
and ``-flag=true|false`` for booleans. Click wants ``--long`` names, so before click parses,
long options written with one dash get a second one, and booleans with a value become
``--flag`` / ``--no-flag``. A misspelt long option gets its second dash too (``cmdstalk``'s
only short option is ``-h``, so ``-addres`` is no cluster of ``-a -d ...``): click then
names it and suggests the option meant (``Did you mean '--address'?``). Everything else
passes through untouched: values (even ones starting with a dash), short options such as
``-h``, and all after ``--``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_TRUE = {"1", "t", "true", "y", "yes", "on"}
_FALSE = {"0", "f", "false", "n", "no", "off"}
# A long option's name (known or misspelt); not a negative number such as -1.
_LONG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]+")


def normalize(
    args: Sequence[str], value_options: Iterable[str], flag_options: Iterable[str]
) -> list[str]:
    """Rewrite Go-style arguments into the GNU form click parses.

    ``value_options``: long names (without dashes) that take a value; ``flag_options``:
    boolean flags that have a ``--no-NAME`` form.
    """
    values = set(value_options)
    flags = set(flag_options)
    known = values | flags
    out: list[str] = []
    expect_value = False
    for i, arg in enumerate(args):
        if expect_value:  # the separate value of the previous option, whatever it looks like
            out.append(arg)
            expect_value = False
            continue
        if arg == "--":
            out.extend(args[i:])
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            name = arg[1:].partition("=")[0]
            if name in known or _LONG_NAME.fullmatch(name):
                arg = "-" + arg
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in flags and eq:
                if value.lower() in _TRUE:
                    arg = f"--{name}"
                elif value.lower() in _FALSE:
                    arg = f"--no-{name}"
            elif name in values and not eq:
                expect_value = True
        out.append(arg)
    return out
