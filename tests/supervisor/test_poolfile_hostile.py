"""A config file that is not what it claims (issue #27, items 3-5): a FIFO, a device, a
huge or unreadable file, a link swapped while it is read, and malformed contents. Each is
one ``PoolFileError`` line naming the file (and the key), never a hang, a traceback or
unbounded memory; the SIGHUP side, with a real ``cmdstalk``, is ``test_reload_hostile``."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cmdstalk_py.supervisor.config import Config
from cmdstalk_py.supervisor.fileread import MAX_BYTES
from cmdstalk_py.supervisor.poolfile import PoolFileError, load_pools
from cmdstalk_py.supervisor.tomlread import MAX_KEY_PARTS

POOL = '[pools.p]\ncommand = "cat"\n'


def refused(path: Path) -> str:
    """The one line ``load_pools(path)`` raises, found within a deadline (a read that
    blocks is a failure here, not a hung test)."""
    outcome: list[BaseException | tuple[Config, ...]] = []

    def load() -> None:
        try:
            outcome.append(load_pools(path))
        except BaseException as e:  # whatever came out, the test looks at it
            outcome.append(e)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(20)
    assert outcome, f"load_pools({path}) still blocked after 20 s"
    error = outcome[0]
    assert isinstance(error, PoolFileError), error
    message = str(error)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pools.toml"
    os.mkfifo(fifo)
    try:
        assert "a FIFO, not a regular file" in refused(fifo)
    finally:
        # A reader still waiting in open() (without the fix) is let go by a writer.
        with contextlib.suppress(OSError):  # ENXIO: nobody waits
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_link_to_dev_zero_is_refused_before_reading(tmp_path: Path) -> None:
    link = tmp_path / "pools.toml"
    link.symlink_to("/dev/zero")
    assert "a character device, not a regular file" in refused(link)


def test_a_directory_and_a_socket_are_refused(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    link = tmp_path / "pools.toml"
    link.symlink_to(tmp_path / "dir")
    assert "a directory, not a regular file" in refused(link)
    path = tmp_path / "s.toml"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        assert "a socket, not a regular file" in refused(path)


def test_a_file_over_the_bound_is_refused_and_one_at_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    comment = "#" + "x" * (MAX_BYTES - len(POOL) - 2) + "\n"
    path.write_text(comment + POOL)
    assert path.stat().st_size == MAX_BYTES
    assert [p.pool for p in load_pools(path)] == ["p"]
    path.write_text("#x" + comment + POOL)
    assert f"larger than {MAX_BYTES} bytes" in refused(path)


def test_a_dangling_link_and_a_link_loop_are_one_line(tmp_path: Path) -> None:
    link = tmp_path / "pools.toml"
    link.symlink_to(tmp_path / "gone.toml")
    assert "No such file or directory" in refused(link)
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    assert "Too many levels of symbolic links" in refused(loop)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(POOL)
    path.chmod(0)
    assert "Permission denied" in refused(path)


FLIPPER = """
import os, sys
link, targets = sys.argv[1], sys.argv[2:]
tmp = link + ".tmp"
i = 0
while True:
    i += 1
    try:
        os.remove(tmp)
    except FileNotFoundError:
        pass
    os.symlink(targets[i % 2], tmp)
    os.replace(tmp, link)
"""


def test_a_link_swapped_while_read_gives_one_file_never_a_mix(tmp_path: Path) -> None:
    """The link flips between two releases, each with its own ``work`` directory and a
    marker in ``env``: every load is one release, its relative ``cwd`` its own."""
    releases = []
    for name in ("one", "two"):
        release = tmp_path / name
        (release / "work").mkdir(parents=True)
        (release / "pools.toml").write_text(
            f'[pools.p]\ncommand = "cat"\ncwd = "work"\nenv = {{ RELEASE = "{name}" }}\n'
        )
        releases.append(release)
    link = tmp_path / "pools.toml"
    link.symlink_to(releases[0] / "pools.toml")
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(link), *(str(r / "pools.toml") for r in releases)]
    )
    try:
        seen: set[str] = set()
        for _ in range(400):
            try:
                (pool,) = load_pools(link)
            except PoolFileError as e:  # the link was itself between two renames
                assert "replaced by a link" in str(e) or "No such file" in str(e), e
                continue
            marker = dict(pool.env)["RELEASE"]
            assert pool.cwd == str(tmp_path / marker / "work"), (marker, pool.cwd)
            seen.add(marker)
        assert seen == {"one", "two"}  # the flipper did flip under the loads
    finally:
        flipper.kill()
        flipper.wait()


DEEP = "a = " + "[" * 5000 + "]" * 5000 + "\n" + POOL


@pytest.mark.parametrize(
    ("raw", "mentions"),
    [
        (DEEP.encode(), "nested too deeply"),
        ("[pools.p]\ncommand = 'caf\u00e9'\n".encode("latin-1"),
         "not UTF-8 at line 2, column 15 (byte 25)"),
        (b"\xef\xbb\xbf" + b"\xff" + POOL.encode(), "not UTF-8 at line 1, column 4 (byte 4)"),
    ],
    ids=["nested-5000", "latin-1", "bad-byte"],
)
def test_malformed_contents_are_one_line(tmp_path: Path, raw: bytes, mentions: str) -> None:
    path = tmp_path / "pools.toml"
    path.write_bytes(raw)
    assert mentions in refused(path)


@pytest.mark.parametrize(
    "text",
    [
        "a" + ".a" * (MAX_BYTES // 2 - 4) + " = 1\n",  # tomllib: quadratic in the parts
        "[" + "a." * (MAX_BYTES // 2 - 4) + "a]\n",
        POOL + "env.a.b.c.d.e.f.g.h = 'v'\n",
        POOL + 'env."x".a."y".b."z".c.d.e = "v"\n',  # quoted parts are parts too
    ],
    ids=["1-MiB-key", "1-MiB-header", "9-parts", "9-parts-quoted"],
)
def test_a_key_of_more_parts_than_any_pool_file_needs_is_refused(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(text)
    assert f"has more than {MAX_KEY_PARTS} dotted parts" in refused(path)


def test_dots_in_strings_and_comments_are_no_key_parts(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(
        "# a.b.c.d.e.f.g.h.i.j\n"
        '[pools."a.b.c.d.e.f.g.h.i"]\ncommand = """python -m a.b.c.d.e.f.g.h.i \\""" \'\'\'"""\n'
        "shell = ['/bin/sh', '-c'] # x.y.z.a.b.c.d.e.f.g\n"
        'address = ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"]\n'
        "[pools.\"a.b.c.d.e.f.g.h.i\".env]\nX = 'v.v.v.v.v.v.v.v.v.v'\n"
    )
    (pool,) = load_pools(path)
    assert pool.cmd == 'python -m a.b.c.d.e.f.g.h.i """ \'\'\''
    assert pool.env == (("X", "v.v.v.v.v.v.v.v.v.v"),)


def test_a_line_of_unclosed_quotes_is_scanned_once(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    # Every quote opens a string no later quote closes: a scanner that looked from each one
    # to the line's end would take hours (and the dots make the scan run at all).
    path.write_text('x = "' + '\\".' * (MAX_BYTES // 3 - 20) + "\n" + POOL)
    assert "not valid TOML" in refused(path)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('[pools."\\u001b[2Jx"]\ncommand = "c"\n', 'pools."\\u001B[2Jx": a pool name uses'),
        ('[pools.p]\ncommand = "c"\n"\\u001b]0;t\\u0007" = 1\n',
         'pools.p."\\u001B]0;t\\u0007": unknown key'),
        ('[pools.p]\ncommand = "c"\n"a\\nb" = 1\n', 'pools.p."a\\nb": unknown key'),
        ('[pools.p]\ncommand = "c"\n"\\u202Eyek" = 1\n', 'pools.p."\\u202Eyek": unknown key'),
        ('[pools.p]\ncommand = "c"\nenv = { "A\\u009b" = "v" }\n',
         'pools.p.env."A\\u009B": not an environment'),
        ('"mail.in" = 1\n' + POOL, '"mail.in": unknown key'),
    ],
    ids=["csi-in-pool-name", "osc-in-key", "newline-in-key", "bidi-in-key", "c1-in-env",
         "dot-in-key"],
)
def test_names_are_shown_as_toml_writes_them_never_raw(
    tmp_path: Path, text: str, shown: str
) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(text)
    message = refused(path)
    assert shown in message
    assert message.isprintable()  # no control, no bidirectional override reaches a terminal


def test_a_huge_value_is_quoted_in_part(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(POOL + f'workers = "{"9" * 100_000}"\n')
    message = refused(path)
    assert "pools.p.workers: expected a whole number" in message and len(message) < 300


@pytest.mark.parametrize(
    ("line", "key", "what"),
    [
        ('command = "cat\\u0000 -n"', "command", "the command"),
        ('env = { A = "x\\u0000y" }', "env.A", "the value"),
        ('shell = ["/bin/sh\\u0000", "-c"]', "shell", "the shell"),
        ('cwd = "/tmp\\u0000"', "cwd", "the directory"),
        ('address = "local\\u0000host:11300"', "address", "the address"),
    ],
    ids=["command", "env", "shell", "cwd", "address"],
)
def test_a_nul_no_job_could_start_with_is_refused(
    tmp_path: Path, line: str, key: str, what: str
) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(("[pools.p]\n" if key == "command" else POOL) + line + "\n")
    assert f"pools.p.{key}: {what} contains a NUL character (\\u0000)" in refused(path)
