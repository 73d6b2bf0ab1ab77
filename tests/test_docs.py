"""The docs work as written: every shell block of README.md and docs/*.md runs as pasted.

Each ```sh, ```bash or ```console block runs in ``bash -euo pipefail`` with the virtualenv's
``bin/`` first on PATH (so ``cmdstalk``, ``cmdstalk-server``, ``cmdstalk-ctl`` and
``python`` are this project's), in a fresh temporary directory, with a bundled
``cmdstalk-server`` on a free port named by CMDSTALK_ADDRESS. The HTML comment on the line
before a block changes that (docs/development.md lists the words):

    <!-- not run: REASON -->
    <!-- run: in the checkout, no server | own server, with FILE and FILE from tests/docs/, slow -->

A block that would serve forever must say itself how it ends (``--max-jobs``, ``wait``):
the test never shortens a command, it only kills what a block left behind. The same module
checks that links between the pages resolve and that the README's demo table is what the
demo prints.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from tests.helpers import ServerProcess, free_port, start_server_process

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Pages whose links are checked too; their shell blocks are reference, not run.
LINKED_PAGES = [*PAGES, ROOT / "benchmarks" / "README.md"]
FIXTURES = Path(__file__).resolve().parent / "docs"
SHELLS = frozenset({"sh", "bash", "console"})
BIN = Path(sys.executable).parent
BLOCK_TIMEOUT = 90.0  # seconds; under pytest-timeout's 120 so a stuck block fails with its output
SLOW_BLOCK_TIMEOUT = 400.0

MARKER = re.compile(r"<!--\s*(not run|run):(.*?)-->\s*$")
FIXTURE_ITEM = re.compile(r"with (.+) from tests/docs/")

ServerMode = Literal["bundled", "none", "own"]


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page, and the marker comment right before it, if any."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Plan:
    """How a shell block is run, from its marker."""

    run: bool = True
    reason: str = ""
    in_checkout: bool = False
    server: ServerMode = "bundled"
    fixtures: tuple[str, ...] = ()
    slow: bool = False


def parse_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with the last non-blank line before it if a comment."""
    blocks: list[Block] = []
    before: str | None = None
    opened: tuple[int, str, list[str]] | None = None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if opened is not None:
            if line.startswith("```"):
                start, lang, body = opened
                marker = before if before is not None and before.startswith("<!--") else None
                blocks.append(Block(page, start, lang, "\n".join(body) + "\n", marker))
                opened, before = None, None
            else:
                opened[2].append(line)
        elif line.startswith("```"):
            opened = (number, line[3:].strip(), [])
        elif line.strip():
            before = line.strip()
    assert opened is None, f"{page.name}:{opened[0] if opened else 0}: fence never closed"
    return blocks


def plan_of(block: Block) -> Plan:
    """The block's plan, or ValueError naming what is wrong with its marker."""
    if block.marker is None:
        return Plan()
    found = MARKER.fullmatch(block.marker)
    if found is None:
        raise ValueError(f"{block.name}: not a marker: {block.marker}")
    kind, text = found.group(1), found.group(2).strip()
    if kind == "not run":
        if not text:
            raise ValueError(f"{block.name}: 'not run' needs a reason")
        return Plan(run=False, reason=text)
    return _run_plan(block, text)


def _run_plan(block: Block, text: str) -> Plan:
    in_checkout, slow = False, False
    server: ServerMode = "bundled"
    fixtures: tuple[str, ...] = ()
    for item in (part.strip() for part in text.split(",")):
        fixture = FIXTURE_ITEM.fullmatch(item)
        if item == "in the checkout":
            in_checkout = True
        elif item == "no server":
            server = "none"
        elif item == "own server":
            server = "own"
        elif item == "slow":
            slow = True
        elif fixture is not None:
            fixtures = tuple(name.strip() for name in fixture.group(1).split(" and "))
        else:
            raise ValueError(f"{block.name}: unknown run item {item!r}")
    missing = [name for name in fixtures if not (FIXTURES / name).is_file()]
    if missing:
        raise ValueError(f"{block.name}: no such fixture in tests/docs/: {missing}")
    return Plan(True, "", in_checkout, server, fixtures, slow)


def script_of(block: Block) -> str:
    """What bash runs: the block itself, or a console block's ``$ `` lines."""
    if block.lang != "console":
        return block.code
    lines: list[str] = []
    continued = False
    for line in block.code.splitlines():
        if continued or line.startswith("$ "):
            lines.append(line if continued else line[2:])
            continued = line.endswith("\\")
    return "\n".join(lines) + "\n"


def shell_blocks() -> list[Block]:
    return [b for page in PAGES for b in parse_blocks(page) if b.lang in SHELLS]


def runnable_params() -> list[object]:
    params: list[object] = []
    for block in shell_blocks():
        try:
            plan = plan_of(block)
        except ValueError:
            continue  # test_markers_are_well_formed names it
        if plan.run:
            marks = [pytest.mark.slow, pytest.mark.timeout(SLOW_BLOCK_TIMEOUT + 60)]
            chosen = marks if plan.slow else []
            params.append(pytest.param(block, plan, id=block.name, marks=chosen))
    return params


def block_env(plan: Plan, server: ServerProcess | None) -> dict[str, str]:
    # The runner's own CMDSTALK_* settings must not leak into a block: it sees what a reader has.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMDSTALK_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    if server is not None:
        env["CMDSTALK_ADDRESS"] = f"127.0.0.1:{server.port}"
    elif plan.server == "own":
        env["CMDSTALK_ADDRESS"] = f"127.0.0.1:{free_port()}"
    return env


def run_script(script: str, cwd: Path, env: dict[str, str], log: Path, timeout: float) -> int:
    """bash -euo pipefail on ``script``; whatever it leaves running is killed afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # one group: background commands of the block die with it
        )  # fmt: skip
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return -1
        finally:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def bundled_server() -> ServerProcess:
    return start_server_process(lambda port: [str(BIN / "cmdstalk-server"), "-p", str(port)])


@pytest.mark.parametrize(("block", "plan"), runnable_params())
def test_block_runs_as_pasted(block: Block, plan: Plan, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for name in plan.fixtures:
        shutil.copy(FIXTURES / name, work / name)
    server = bundled_server() if plan.server == "bundled" else None
    log = tmp_path / "output.txt"
    timeout = SLOW_BLOCK_TIMEOUT if plan.slow else BLOCK_TIMEOUT
    try:
        cwd = ROOT if plan.in_checkout else work
        status = run_script(script_of(block), cwd, block_env(plan, server), log, timeout)
    finally:
        if server is not None:
            server.stop()
    output = log.read_text(errors="replace")[-6000:]
    what = f"timed out after {timeout:.0f}s" if status == -1 else f"exited {status}"
    assert status == 0, f"{block.name} {what}:\n{block.code}\n--- output ---\n{output}"


def test_markers_are_well_formed() -> None:
    problems = []
    for page in PAGES:
        for block in parse_blocks(page):
            if block.lang not in SHELLS:
                if block.marker is not None and MARKER.fullmatch(block.marker):
                    problems.append(f"{block.name}: a run marker on a {block.lang!r} block")
                continue
            try:
                plan_of(block)
            except ValueError as exc:
                problems.append(str(exc))
    assert not problems, "\n".join(problems)


def test_a_failing_block_fails(tmp_path: Path) -> None:
    """The runner reports a broken command (-e), a broken pipe stage and an unset variable."""
    env = block_env(Plan(server="none"), None)
    for script in ("cmdstalk --no-such-flag\necho after\n", "false | cat\n", "echo $NOPE\n"):
        assert run_script(script, tmp_path, env, tmp_path / "log", BLOCK_TIMEOUT) != 0, script


def test_markers_parse() -> None:
    page = ROOT / "README.md"

    def marked(text: str, lang: str = "sh") -> Plan:
        return plan_of(Block(page, 1, lang, "true\n", text))

    assert marked("<!-- run: in the checkout, own server, slow -->") == Plan(
        in_checkout=True, server="own", slow=True
    )
    assert marked("<!-- run: with jobs.txt from tests/docs/ -->").fixtures == ("jobs.txt",)
    assert marked("<!-- not run: needs root -->") == Plan(run=False, reason="needs root")
    for bad in (
        "<!-- not run: -->",
        "<!-- run: in a hurry -->",
        "<!-- run: with x from tests/docs/ -->",
    ):
        with pytest.raises(ValueError):
            marked(bad)


def test_console_blocks_run_their_prompt_lines() -> None:
    code = "$ cmdstalk-ctl put mail \\\n    'hi'\n1\n$ echo done\ndone\n"
    block = Block(ROOT / "README.md", 1, "console", code, None)
    assert script_of(block) == "cmdstalk-ctl put mail \\\n    'hi'\necho done\n"


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose_lines(page) if line.startswith("#")}


def prose_lines(page: Path) -> list[str]:
    """The page's lines outside code fences."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def links(page: Path) -> list[str]:
    spans = [re.sub(r"`[^`]*`", "", line) for line in prose_lines(page)]  # code is not a link
    return [m.group(1) for line in spans for m in LINK.finditer(line)]


def test_links_between_pages_resolve() -> None:
    broken = []
    for page in LINKED_PAGES:
        for target in links(page):
            if re.match(r"[a-z]+:", target):
                continue  # https: and the like: not this test's to fetch
            path_text, _, anchor = target.partition("#")
            path = (page.parent / path_text).resolve() if path_text else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    assert not broken, "\n".join(broken)


def test_every_page_and_picture_is_reachable_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    pictures = {
        (page.parent / t).resolve() for page in PAGES for t in links(page) if t.endswith(".png")
    }
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []
    assert [p.name for p in (ROOT / "docs").glob("*.png") if p.resolve() not in pictures] == []


DEMO_ROW = re.compile(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(exit \d+|SIG[A-Z]+)\s+\d+\s")


def demo_rows(text: str) -> list[tuple[str, ...]]:
    """Job, worker, outcome and exit of each row of the demo's table (times and order vary)."""
    return sorted(m.groups() for m in map(DEMO_ROW.match, text.splitlines()) if m)


def test_the_readme_demo_table_is_what_the_demo_prints() -> None:
    readme = next(b for b in parse_blocks(ROOT / "README.md") if b.code.startswith(" job  worker"))
    demo = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True,
        timeout=BLOCK_TIMEOUT, check=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    printed = demo_rows(demo.stdout)
    assert len(printed) >= 6, demo.stdout
    assert demo_rows(readme.code) == printed
