"""A real ``cmdstalk --http`` for the dashboard tests, and the job command they run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers import (
    BeanstalkServer,
    ServerProcess,
    beanstalkd_path,
    free_port,
    start_server_process,
    wait_until,
)
from tests.ops.procs import stop_process

CMDSTALK = str(Path(sys.executable).with_name("cmdstalk"))
SERVER = str(Path(sys.executable).with_name("cmdstalk-server"))
TOKEN = "t0ken-for-tests"
Started = list[tuple[ServerProcess, BeanstalkServer]]  # each server and its process

# The payload picks the behaviour: "slow" prints a line every 0.2 s for a long while,
# "fail" writes hostile markup and an escape to stderr and exits 3 (buried: 3 is listed),
# "hog FILE" holds HOG_MB MiB (every page written), says so, and exits 0 once FILE exists.
HOG_MB = 50
HOG = f"""import os, sys, time
b = b"1" * ({HOG_MB} << 20)
print("holding", flush=True)
end = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
    time.sleep(0.05)"""
JOB = r"""read p
case "$p" in
  slow*) i=0; while [ $i -lt 150 ]; do echo "tick $i"; i=$((i+1)); sleep 0.2; done ;;
  fail*) echo "starting"; printf 'bad <img src=x onerror="document.title=1"> \033[31mred\n' >&2
         echo 'no such user <script>document.title="pwned"</script>' >&2; exit 3 ;;
  hog\ *) exec PYTHON -c HOG "${p#hog }" ;;
esac""".replace("PYTHON", shlex.quote(sys.executable)).replace("HOG", shlex.quote(HOG))


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CMDSTALK_", "NOTIFY_"))}


def get(url: str, host: str | None = None) -> tuple[int, Any]:
    """GET ``url``: (status, JSON body or text)."""
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            status, data, kind = reply.status, reply.read(), reply.headers["Content-Type"]
    except urllib.error.HTTPError as e:
        status, data, kind = e.code, e.read(), e.headers["Content-Type"]
    return status, json.loads(data) if kind == "application/json" else data.decode()


def post(url: str, body: dict[str, Any], token: str | None) -> tuple[int, Any]:
    """POST ``body`` as JSON with ``token`` in X-Cmdstalk-Token: (status, JSON reply)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Cmdstalk-Token"] = token
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Supervised:
    """A running ``cmdstalk --http`` and its dashboard's base URL and port."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, port: int) -> None:
        self.proc, self.url, self.port = proc, url, port

    def state(self) -> dict[str, Any]:
        status, state = get(self.url + "api/state")
        assert status == 200, state
        return state  # type: ignore[no-any-return]

    def running(self) -> list[dict[str, Any]]:
        return self.state()["running"]  # type: ignore[no-any-return]


@contextmanager
def supervised(
    server: BeanstalkServer,
    tmp_path: Path,
    token: str | None = TOKEN,
    *args: str,
    nofile: int | None = None,
    http_host: str = "127.0.0.1",
) -> Iterator[Supervised]:
    """``cmdstalk --http`` on tube ``work`` (2 brokers), ready once its page answers;
    ``nofile``: its RLIMIT_NOFILE; ``http_host``: the address its dashboard listens on."""
    argv = ["--address", server.address, "--tubes", "work", "--per-tube", "2",
            "--cmd", JOB, "--bury-exit-codes", "3", "--shutdown-timeout", "1", *args]  # fmt: skip
    with _started(argv, tmp_path, token, nofile, http_host) as sup:
        yield sup


@contextmanager
def supervised_servers(
    servers: list[BeanstalkServer], tmp_path: Path, *args: str
) -> Iterator[Supervised]:
    """``cmdstalk --address A,B --http`` on tube ``work`` (2 brokers per server)."""
    address = ",".join(server.address for server in servers)
    argv = ["--address", address, "--tubes", "work", "--per-tube", "2", "--cmd", JOB,
            "--bury-exit-codes", "3", "--shutdown-timeout", "1", *args]  # fmt: skip
    with _started(argv, tmp_path, TOKEN) as sup:
        yield sup


@contextmanager
def server_processes(kind: str, count: int) -> Iterator[Started]:
    """``count`` servers of ``kind`` ("beanstalkd" or "bundled"), each its own process (a
    test may kill one), stopped in finally."""
    binary = beanstalkd_path() if kind == "beanstalkd" else SERVER
    assert binary is not None
    started: Started = []
    try:
        for _ in range(count):
            process = start_server_process(lambda p: [binary, "-l", "127.0.0.1", "-p", str(p)])
            started.append((process, BeanstalkServer(kind, "127.0.0.1", process.port)))
        yield started
    finally:
        for process, server in started:
            server.close_clients()
            process.stop(timeout=5)


@contextmanager
def supervised_pools(server: BeanstalkServer, tmp_path: Path, pools: str) -> Iterator[Supervised]:
    """``cmdstalk --config FILE --http``: ``pools`` is the file's pool tables; the top level
    gives the address and ``JOB`` as every pool's command."""
    path = tmp_path / "pools.toml"
    path.write_text(f'address = "{server.address}"\ncommand = \'\'\'{JOB}\'\'\'\n{pools}')
    with _started(["--config", str(path), "--shutdown-timeout", "1"], tmp_path, TOKEN) as sup:
        yield sup


@contextmanager
def _started(
    args: list[str],
    tmp_path: Path,
    token: str | None,
    nofile: int | None = None,
    http_host: str = "127.0.0.1",
) -> Iterator[Supervised]:
    port = free_port()
    env = base_env() | ({"CMDSTALK_HTTP_TOKEN": token} if token else {})
    host = f"[{http_host}]" if ":" in http_host else http_host
    argv = [CMDSTALK, *args, "--http", f"{host}:{port}"]
    if nofile is not None:  # as a unit without LimitNOFILE= runs it: systemd's 1024
        argv = ["sh", "-c", f'ulimit -n {nofile} && exec "$0" "$@"', *argv]
    with open(tmp_path / "cmdstalk.err", "wb") as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://{host}:{port}/"
    try:
        wait_until(lambda: proc.poll() is not None or _answers(url), timeout=30,
                   message="the dashboard")  # fmt: skip
        assert proc.poll() is None, (tmp_path / "cmdstalk.err").read_text()
        yield Supervised(proc, url, port)
    finally:
        stop_process(proc)


def _answers(url: str) -> bool:
    try:
        return get(url + "api/running")[0] == 200
    except OSError:
        return False
