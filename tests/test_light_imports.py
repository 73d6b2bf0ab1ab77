"""The core entry points stay light: no pyspark, prometheus-client or pandas on start-up."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("pyspark", "prometheus_client", "pandas", "pyarrow", "matplotlib")


def imported_modules(code: str) -> set[str]:
    """Top-level names of every module imported by running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "code",
    [
        # What `cmdstalk --help` loads: the CLI module with all its options.
        "import cmdstalk_py.supervisor.cli, cmdstalk_py.supervisor.wiring",
        # What `cmdstalk-server` loads before it serves.
        "import cmdstalk_py.server.cli, cmdstalk_py.server.run",
    ],
    ids=["cmdstalk", "cmdstalk-server"],
)
def test_entry_points_do_not_import_heavy_packages(code: str) -> None:
    modules = imported_modules(code)
    assert "cmdstalk_py" in modules  # the probe really imported our code
    assert modules.isdisjoint(HEAVY), sorted(modules & set(HEAVY))


def test_server_does_not_import_client_side_libraries() -> None:
    modules = imported_modules("import cmdstalk_py.server.cli, cmdstalk_py.server.run")
    assert modules.isdisjoint({"click", "greenstalk", "psutil", "tenacity"})


def test_server_runs_without_asyncio() -> None:
    # Its own loop (loop/core.py) exists partly to save asyncio's ~55 ms import.
    modules = imported_modules(
        "import cmdstalk_py.server.cli, cmdstalk_py.server.run, cmdstalk_py.server.embedded"
    )
    assert "asyncio" not in modules


def test_supervisor_runs_without_asyncio() -> None:
    # The supervisor's workers run on the project's loop (loop/core.py, loop/futures.py):
    # asyncio's import and its per-wake-up cost are both what it was built to save. The
    # dashboard (--http) alone still runs on asyncio, in its own thread, imported then.
    modules = imported_modules(
        "import cmdstalk_py.supervisor.cli, cmdstalk_py.supervisor.wiring, "
        "cmdstalk_py.supervisor.lifecycle, cmdstalk_py.supervisor.broker, "
        "cmdstalk_py.process, cmdstalk_py.client.aio, cmdstalk_py.client.connection, "
        "cmdstalk_py.spark.drain"
    )
    assert "asyncio" not in modules


def test_connecting_to_a_numeric_address_loads_no_idna_codec() -> None:
    # getaddrinfo encodes a str host with the "idna" codec (unicodedata, stringprep): a
    # noticeable part of the supervisor's start-up, for nothing when the host is ASCII.
    probe = (
        "import socket, sys\n"
        "from cmdstalk_py.loop import tools\n"
        "from cmdstalk_py.client.aio import AsyncClient\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "async def main():\n"
        "    client = await AsyncClient.open('127.0.0.1', server.getsockname()[1])\n"
        "    client.close()\n"
        "tools.run(main())\n"
        "print('encodings.idna' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False", out
