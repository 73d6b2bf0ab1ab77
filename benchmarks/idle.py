"""Idle-cost benchmark (issue #18): what 300 workers cost while no job arrives.

50 tubes, nothing put in them, 300 workers watching: ``cmdstalk --per-tube 6``, ``cmdstalk
--workers 300`` (the pools runtime's shared workers; skipped with the reason when ``cmdstalk
--help`` does not list ``--workers``) and Go cmdstalk ``-per-tube=6``, each against the real
beanstalkd and the bundled server, a fresh server per run. Once the server counts every
worker's connection and a settling second has passed, CPU seconds of the supervisor and of
the server (every thread, from /proc/PID/task/*/schedstat) are read at the start and the end of the
window (``--seconds``, 10 by default) and shown as a percentage of one core; the server's
reserve counters over the same window show the requests that cost it.

Go cmdstalk: ``--go-cmdstalk PATH`` (or ``CMDSTALK_GO_BIN``) points at a ready binary;
otherwise it is built offline from the bare git snapshots under ``--go-sources`` (or
``CMDSTALK_GO_SOURCES``, default ``/work/.mirror``: ``99designs+cmdstalk/repo`` and its one
dependency ``kr+beanstalk/repo``) with the local ``go``, into a temporary directory. Where
neither is available, Go is skipped and the reason printed.

Usage: ``python benchmarks/idle.py [--quick] [--seconds S] [--servers beanstalkd,bundled]
[--modes per-tube,workers,go] [--go-cmdstalk PATH]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from server_procs import (
    RunningServer,
    ServerKind,
    beanstalkd_kind,
    bundled_kind,
    start_server,
)

READY_TIMEOUT = 180.0  # 300 threads connecting on a shared two-core machine
SETTLE = 1.0  # the start-up burst (connects, watches) is not idle cost
MODES = ("per-tube", "workers", "go")


@dataclass(frozen=True)
class Shape:
    tubes: int
    per_tube: int

    @property
    def workers(self) -> int:
        return self.tubes * self.per_tube

    def tube_names(self) -> str:
        return ",".join(f"idle{i:02d}" for i in range(self.tubes))


@dataclass(frozen=True)
class Figure:
    server: str
    mode: str
    supervisor_cpu: float  # percent of one core
    server_cpu: float
    reserves_per_second: float
    threads: int
    rss_mib: float


def cmdstalk_argv() -> list[str]:
    """The ``cmdstalk`` console script next to this interpreter, else ``-m cmdstalk_py``."""
    script = Path(sys.executable).with_name("cmdstalk")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cmdstalk_py"]


def supervisor_argv(mode: str, shape: Shape, address: str, go_bin: str | None) -> list[str]:
    tubes = shape.tube_names()
    if mode == "go":
        assert go_bin is not None
        return [go_bin, f"-address={address}", f"-tubes={tubes}",
                f"-per-tube={shape.per_tube}", "-cmd=cat"]
    count = ["--per-tube", str(shape.per_tube)] if mode == "per-tube" else [
        "--workers", str(shape.workers)]
    return [*cmdstalk_argv(), "--address", address, "--tubes", tubes, *count, "--cmd", "cat",
            "--log-level", "warning"]


def workers_mode_reason() -> str | None:
    """Why ``--workers`` cannot be measured here, or None when this cmdstalk has it."""
    out = subprocess.run([*cmdstalk_argv(), "--help"], capture_output=True, text=True,
                         timeout=60, check=False).stdout
    if re.search(r"--workers\b", out):
        return None
    return "`cmdstalk --help` lists no --workers (the pools runtime of issue #18 is not here)"


def go_cmdstalk(given: str | None, sources: Path, workdir: Path) -> tuple[str | None, str]:
    """(Go cmdstalk's path, "") or (None, why Go is skipped)."""
    if given:
        if os.access(given, os.X_OK):
            return given, ""
        return None, f"--go-cmdstalk/CMDSTALK_GO_BIN {given!r} is not an executable file"
    go = shutil.which("go")
    src, dep = sources / "99designs+cmdstalk" / "repo", sources / "kr+beanstalk" / "repo"
    if go is None:
        return None, "no `go` on PATH and no --go-cmdstalk PATH / CMDSTALK_GO_BIN"
    if not (src.is_dir() and dep.is_dir()):
        return None, (f"Go cmdstalk's sources are not under {sources} (expected "
                      "99designs+cmdstalk/repo and kr+beanstalk/repo); give --go-cmdstalk PATH")
    try:
        return _build_go(go, src, dep, workdir), ""
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return None, f"building Go cmdstalk failed: {e}"


def _build_go(go: str, src: Path, dep: Path, workdir: Path) -> str:
    """``git archive`` both snapshots and ``go build`` offline, the dependency replaced."""
    main, lib = workdir / "cmdstalk", workdir / "beanstalk"
    main.mkdir()
    lib.mkdir()
    _archive(src, "HEAD", main)
    gomod = (main / "go.mod").read_text()
    # The require line's pseudo-version ends with the dependency's commit.
    found = re.search(r"github\.com/kr/beanstalk v\S*-([0-9a-f]{12})", gomod)
    if found is None:
        raise ValueError("go.mod does not require github.com/kr/beanstalk at a commit")
    _archive(dep, found[1], lib)
    (lib / "go.mod").write_text("module github.com/kr/beanstalk\n\ngo 1.17\n")
    (main / "go.mod").write_text(gomod + "\nreplace github.com/kr/beanstalk => ../beanstalk\n")
    env = {**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    env.setdefault("GOCACHE", str(workdir / "gocache"))
    out = workdir / "cmdstalk-go"
    proc = subprocess.run([go, "build", "-o", str(out), "."], cwd=main, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise ValueError(proc.stderr.strip().splitlines()[-1] if proc.stderr else "go build")
    return str(out)


def _archive(repo: Path, commit: str, into: Path) -> None:
    archive = subprocess.run(["git", f"--git-dir={repo}", "archive", commit],
                             capture_output=True, timeout=120, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True, timeout=120)


def server_stats(address: tuple[str, int]) -> dict[str, int]:
    """The server's numeric ``stats`` (one short-lived connection)."""
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.startswith(b"OK ") or data.count(b"\r\n") < 2:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            data += chunk
    stats: dict[str, int] = {}
    for line in data.decode().splitlines()[1:]:
        key, _, value = line.partition(": ")
        if value.strip().isdigit():
            stats[key.strip()] = int(value)
    return stats


def _reserves(stats: dict[str, int]) -> int:
    return stats.get("cmd-reserve", 0) + stats.get("cmd-reserve-with-timeout", 0)


def _wait_connected(server: RunningServer, proc: subprocess.Popen[bytes], workers: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while server_stats(server.address).get("current-connections", 0) < workers + 1:
        if proc.poll() is not None:
            raise RuntimeError(f"the supervisor exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {workers} connections after {READY_TIMEOUT:g} s")
        time.sleep(0.2)


def cpu_seconds(pid: int) -> float:
    """CPU seconds of every live thread of ``pid``: nanoseconds from schedstat, where the
    clock-tick counters psutil reads would make a 0.1 % difference one tick in ten seconds."""
    try:
        return sum(int((task / "schedstat").read_text().split()[0])
                   for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9
    except (OSError, IndexError, ValueError):
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)


def measure(kind: ServerKind, mode: str, shape: Shape, seconds: float,
            go_bin: str | None) -> Figure:
    """One run: a fresh server, the supervisor idle on it, CPU over ``seconds``."""
    server = start_server(kind)
    proc: subprocess.Popen[bytes] | None = None
    try:
        address = f"{server.address[0]}:{server.address[1]}"
        proc = subprocess.Popen(supervisor_argv(mode, shape, address, go_bin),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        _wait_connected(server, proc, shape.workers)
        time.sleep(SETTLE)
        ps = psutil.Process(proc.pid)
        stats0 = server_stats(server.address)
        sup0, srv0, t0 = cpu_seconds(proc.pid), cpu_seconds(server.pid), time.monotonic()
        time.sleep(seconds)  # the measured window: nothing else talks to the server
        wall = time.monotonic() - t0
        sup1, srv1 = cpu_seconds(proc.pid), cpu_seconds(server.pid)
        stats1 = server_stats(server.address)
        return Figure(kind.name, mode, 100 * (sup1 - sup0) / wall, 100 * (srv1 - srv0) / wall,
                      (_reserves(stats1) - _reserves(stats0)) / wall, ps.num_threads(),
                      ps.memory_info().rss / 2**20)
    finally:
        if proc is not None:
            stop(proc)
        server.stop()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM; SIGKILL to its process group (to it alone when it leads none) if it is
    still there after 60 s. The benchmarks' one way to end a supervisor they started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                proc.kill()
            proc.wait()


def label(mode: str, shape: Shape) -> str:
    return {"per-tube": f"cmdstalk --per-tube {shape.per_tube}",
            "workers": f"cmdstalk --workers {shape.workers}",
            "go": f"Go cmdstalk -per-tube={shape.per_tube}"}[mode]


def report(figures: Sequence[Figure], shape: Shape, seconds: float) -> None:
    print(f"\nidle cost: {shape.workers} workers on {shape.tubes} tubes, no jobs, "
          f"{seconds:g} s window; CPU in % of one core")
    head = (f"{'server':<11} {'supervisor':<28} {'supervisor %':>12} {'server %':>9} "
            f"{'reserves/s':>10} {'threads':>7} {'RSS MiB':>8}")
    print(head)
    for f in figures:
        print(f"{f.server:<11} {label(f.mode, shape):<28} {f.supervisor_cpu:>12.2f} "
              f"{f.server_cpu:>9.2f} {f.reserves_per_second:>10.1f} {f.threads:>7} "
              f"{f.rss_mib:>8.1f}")
    go = {f.server: f for f in figures if f.mode == "go"}
    for f in figures:
        if f.mode != "go" and f.server in go:
            g = go[f.server]
            print(f"{f.server}: {label(f.mode, shape)} - Go: supervisor "
                  f"{f.supervisor_cpu - g.supervisor_cpu:+.2f} points, server "
                  f"{f.server_cpu - g.server_cpu:+.2f} points (target: within 0.2)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true",
                   help="10 tubes x 2, a 1.5 s window: a smoke run, not a figure")
    p.add_argument("--seconds", type=float, default=None, help="measured window (10)")
    p.add_argument("--servers", default="beanstalkd,bundled")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--go-cmdstalk", default=os.environ.get("CMDSTALK_GO_BIN"),
                   help="a ready Go cmdstalk binary (or CMDSTALK_GO_BIN)")
    p.add_argument("--go-sources", type=Path,
                   default=Path(os.environ.get("CMDSTALK_GO_SOURCES", "/work/.mirror")),
                   help="where the bare git snapshots of Go cmdstalk and kr/beanstalk are")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    shape = Shape(10, 2) if args.quick else Shape(50, 6)
    seconds = args.seconds or (1.5 if args.quick else 10.0)
    kinds = {"beanstalkd": beanstalkd_kind(), "bundled": bundled_kind()}
    modes = [m for m in args.modes.split(",") if m]
    skipped: dict[str, str] = {}
    if "workers" in modes and (why := workers_mode_reason()):
        skipped["workers"] = why
    with tempfile.TemporaryDirectory(prefix="idle-bench-") as tmp:
        go_bin = None
        if "go" in modes:
            go_bin, why = go_cmdstalk(args.go_cmdstalk, args.go_sources, Path(tmp))
            if go_bin is None:
                skipped["go"] = why
        for mode, why in skipped.items():
            print(f"skipped {mode}: {why}", flush=True)
        figures: list[Figure] = []
        for name in args.servers.split(","):
            kind = kinds.get(name)
            if kind is None:
                print(f"skipped server {name}: not found", flush=True)
                continue
            for mode in (m for m in modes if m not in skipped):
                print(f"measuring {label(mode, shape)} on {name} ...", flush=True)
                figures.append(measure(kind, mode, shape, seconds, go_bin))
        report(figures, shape, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
