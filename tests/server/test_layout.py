"""The server package stays in pieces a newcomer can read: module and function sizes.

Issue #15's rule of thumb: no module over ~400 lines (one concept each), no function
over ~60. A module that outgrows it is split along a concept, not cut anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cmdstalk_py.server

PACKAGE = Path(cmdstalk_py.server.__file__).parent
MODULE_LINES = 400
#: ~60: the ``def`` line and a signature wrapped over a few lines included.
FUNCTION_LINES = 62


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_over_400_lines() -> None:
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines())
             for p in _modules()}  # fmt: skip
    assert sizes, PACKAGE
    assert {name: n for name, n in sizes.items() if n > MODULE_LINES} == {}


def test_no_function_over_60_lines() -> None:
    long: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"] = lines
    assert long == {}


def test_blocked_reserves_have_their_own_module() -> None:
    """The engine writes job transitions; who waits and when a wait ends is ``waiters``'."""
    engine = (PACKAGE / "engine.py").read_text()
    for name in ("_arm_waiter", "_end_wait", "_process_queue", "_wake_waiter", "def abort_wait"):
        assert name not in engine, name
    waiters = (PACKAGE / "waiters.py").read_text()
    for name in ("def start", "def end", "def abort", "def wake", "def process_queue"):
        assert name in waiters, name
