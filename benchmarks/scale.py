"""Scale benchmark (issue 26): ``-all -per-tube=K`` over N tubes, against Go cmdstalk.

N tubes on a fresh real beanstalkd, each holding one job delayed by an hour (so every tube
exists and no job runs), then ``cmdstalk -address=... -all -per-tube=K -cmd=cat`` (our CLI,
with Go's flag spelling) and Go cmdstalk with the same flags, one after the other, each on
a fresh server. Both serve every listed tube (``default`` too), so the workers expected are
(N + 1) x K. Per supervisor:

- start: seconds from its start until the server counts every expected worker waiting in
  ``reserve`` (``current-waiting`` of ``stats``, polled every 50 ms);
- threads (``Threads`` of /proc/PID/status) and RSS, once a settling second has passed;
- idle CPU of the supervisor and of the server over a window (``--seconds``) with nothing
  else talking to the server: every thread's scheduler nanoseconds from /proc/PID/task/*/
  schedstat, as a percentage of one core. 30 s by default: both supervisors do periodic
  work every 10 s (Go's list-tubes, our discovery's look at each tube), so a window of a
  few periods counts it fairly.

The table ends with the ratios to Go measured in the same run and the targets of issue 26:
start <= 2 x Go's, RSS <= Go's, threads <= 16, idle CPU (supervisor + server) within 0.2
points of Go's. Go cmdstalk is built as ``idle.py`` builds it (``--go-cmdstalk PATH`` /
``CMDSTALK_GO_BIN``, or from the snapshots under ``--go-sources``); without it, Go is
skipped with the reason printed and no ratios.

``--minimal`` adds the floor of an asyncio supervisor at this scale: a process with the same
number of bare connections on one asyncio (and uvloop) loop, each watching its tube and
waiting in ``reserve`` (``shapes_aio.reserve_everywhere``), measured the same way.

Usage: ``python benchmarks/scale.py [--quick] [--tubes N] [--per-tube K] [--seconds S] [--only NAME]
[--minimal] [--go-cmdstalk PATH]``
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from idle import cmdstalk_argv, cpu_seconds, go_cmdstalk, server_stats, stop
from server_procs import RunningServer, beanstalkd_kind, start_server
from shapes_aio import uvloop_missing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: ``--minimal``: the floor of an asyncio supervisor (shapes_aio.reserve_everywhere).
MINIMAL = ("asyncio", "uvloop")
READY_TIMEOUT = 600.0  # a thread per worker took ~14 s for 6,000 on a quiet 2-core machine
READY_POLL = 0.05
SETTLE = 1.0  # the start-up burst (connects, watches, discovery) is not idle cost
DELAY = 3600  # the tubes' one job stays delayed through the run
TARGET_START, TARGET_THREADS, TARGET_CPU_POINTS = 2.0, 16, 0.2


@dataclass(frozen=True)
class Figure:
    name: str
    workers: int  # waiting in reserve at the start's end: (tubes + default) x per-tube
    start: float  # seconds until every worker waits in reserve
    threads: int
    rss_mib: float
    supervisor_cpu: float  # percent of one core
    server_cpu: float

    @property
    def idle_cpu(self) -> float:
        return self.supervisor_cpu + self.server_cpu


def make_tubes(address: tuple[str, int], tubes: int) -> int:
    """One delayed job in each of ``tubes`` new tubes; how many tubes the server lists."""
    names = [f"scale{i:04d}" for i in range(tubes)]
    batch = b"".join(b"use %s\r\nput 0 %d 120 1\r\nx\r\n" % (n.encode(), DELAY) for n in names)
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(batch)
        replies = _read_lines(s, 2 * tubes)
        bad = [r for r in replies if not r.startswith((b"USING", b"INSERTED"))]
        if bad:
            raise RuntimeError(f"setting up the tubes: {bad[0]!r}")
        s.sendall(b"list-tubes\r\n")
        return sum(line.startswith(b"- ") for line in _read_yaml(s).splitlines())


def _read_lines(s: socket.socket, count: int) -> list[bytes]:
    data = b""
    while data.count(b"\r\n") < count:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data.split(b"\r\n")[:count]


def _read_yaml(s: socket.socket) -> bytes:
    """The body of an ``OK <bytes>`` reply."""
    data = b""
    while b"\r\n" not in data or len(data) < data.index(b"\r\n") + 2 + _size(data) + 2:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    head = data.index(b"\r\n")
    return data[head + 2 : head + 2 + _size(data)]


def _size(data: bytes) -> int:
    word, _, size = data[: data.index(b"\r\n")].partition(b" ")
    if word != b"OK":
        raise RuntimeError(f"list-tubes: {data[:80]!r}")
    return int(size)


def supervisor_argv(name: str, address: str, per_tube: int, go_bin: str | None) -> list[str]:
    """Go's flags for both: ours accepts them as a drop-in."""
    if name in MINIMAL:
        return [sys.executable, str(HERE / "shapes_aio.py"), address, str(per_tube), name]
    flags = [f"-address={address}", "-all", f"-per-tube={per_tube}", "-cmd=cat"]
    return [go_bin, *flags] if name == "go" and go_bin else [*cmdstalk_argv(), *flags]


def wait_ready(
    server: RunningServer, proc: subprocess.Popen[bytes], workers: int, log: Path, started: float
) -> float:
    """Seconds from ``started`` (monotonic) until the server counts ``workers`` connections
    waiting in reserve."""
    while server_stats(server.address).get("current-waiting", 0) < workers:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the supervisor exited with {proc.returncode}: {tail}")
        if time.monotonic() - started > READY_TIMEOUT:
            seen = server_stats(server.address).get("current-waiting", 0)
            raise RuntimeError(f"{seen} of {workers} workers waiting after {READY_TIMEOUT:g} s")
        time.sleep(READY_POLL)
    return time.monotonic() - started


def status(pid: int) -> tuple[int, float]:
    """(threads, RSS in MiB) from /proc/PID/status."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def measure(name: str, tubes: int, per_tube: int, seconds: float, go_bin: str | None,
            workdir: Path) -> Figure:  # fmt: skip
    """One supervisor on a fresh server: start time, threads, RSS, idle CPU."""
    kind = beanstalkd_kind()
    assert kind is not None
    server = start_server(kind)
    proc: subprocess.Popen[bytes] | None = None
    try:
        workers = make_tubes(server.address, tubes) * per_tube
        address = f"{server.address[0]}:{server.address[1]}"
        log = workdir / f"{name}.log"
        with log.open("wb") as out:
            started = time.monotonic()
            proc = subprocess.Popen(
                supervisor_argv(name, address, per_tube, go_bin),
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
        ready = wait_ready(server, proc, workers, log, started)
        time.sleep(SETTLE)
        threads, rss = status(proc.pid)
        sup0, srv0, t0 = cpu_seconds(proc.pid), cpu_seconds(server.pid), time.monotonic()
        time.sleep(seconds)  # the measured window: nothing else talks to the server
        wall = time.monotonic() - t0
        sup1, srv1 = cpu_seconds(proc.pid), cpu_seconds(server.pid)
        return Figure(name, workers, ready, threads, rss, 100 * (sup1 - sup0) / wall,
                      100 * (srv1 - srv0) / wall)  # fmt: skip
    finally:
        if proc is not None:
            stop(proc)
        server.stop()


def label(name: str, per_tube: int) -> str:
    if name in MINIMAL:
        return f"{name} minimal, {per_tube} per tube"
    return f"{'Go cmdstalk' if name == 'go' else 'cmdstalk'} -all -per-tube={per_tube}"


def report(figures: Sequence[Figure], tubes: int, per_tube: int, seconds: float) -> None:
    print(f"\nscale: {tubes} tubes (+ default) x {per_tube} per tube, real beanstalkd, "
          f"idle window {seconds:g} s; CPU in % of one core")  # fmt: skip
    print(f"{'supervisor':<30} {'workers':>7} {'start s':>8} {'threads':>7} {'RSS MiB':>8} "
          f"{'supervisor %':>12} {'server %':>9}")  # fmt: skip
    for f in figures:
        print(f"{label(f.name, per_tube):<30} {f.workers:>7} {f.start:>8.2f} {f.threads:>7} "
              f"{f.rss_mib:>8.1f} {f.supervisor_cpu:>12.2f} {f.server_cpu:>9.2f}")  # fmt: skip
    go = next((f for f in figures if f.name == "go"), None)
    ours = next((f for f in figures if f.name == "cmdstalk"), None)
    if ours is not None:
        print(f"targets: threads {ours.threads} (<= {TARGET_THREADS})")
    if go is None or ours is None:
        return
    print(f"to Go: start {ours.start / go.start:.2f} x (target <= {TARGET_START:g}); "
          f"RSS {ours.rss_mib / go.rss_mib:.2f} x (target <= 1); idle CPU, supervisor + "
          f"server, {ours.idle_cpu - go.idle_cpu:+.2f} points "
          f"(target within {TARGET_CPU_POINTS})")  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--quick",
        action="store_true",
        help="20 tubes x 2, a 1.5 s window: a smoke run, not a figure",
    )
    p.add_argument("--tubes", type=int, default=None, help="tubes (1000)")
    p.add_argument("--per-tube", type=int, default=None, help="workers per tube (6)")
    p.add_argument("--seconds", type=float, default=None, help="idle window (30)")
    p.add_argument("--only", choices=("cmdstalk", "go"), help="measure one supervisor")
    p.add_argument(
        "--minimal",
        action="store_true",
        help="also N x K bare asyncio (and uvloop) connections waiting in reserve: the floor",
    )
    p.add_argument(
        "--go-cmdstalk",
        default=os.environ.get("CMDSTALK_GO_BIN"),
        help="a ready Go cmdstalk binary (or CMDSTALK_GO_BIN)",
    )
    p.add_argument(
        "--go-sources",
        type=Path,
        default=Path(os.environ.get("CMDSTALK_GO_SOURCES", "/work/.mirror")),
        help="where the bare git snapshots of Go cmdstalk and kr/beanstalk are",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tubes = args.tubes or (20 if args.quick else 1000)
    per_tube = args.per_tube or (2 if args.quick else 6)
    seconds = args.seconds or (1.5 if args.quick else 30.0)
    if beanstalkd_kind() is None:
        print("scale benchmark skipped: beanstalkd not found (set BEANSTALKD_PATH)")
        return 0
    names = [args.only] if args.only else ["cmdstalk", "go"]
    if args.minimal:
        names += [name for name in MINIMAL if name == "asyncio" or not uvloop_missing()]
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        go_bin = None
        if "go" in names:
            go_bin, why = go_cmdstalk(args.go_cmdstalk, args.go_sources, Path(tmp))
            if go_bin is None:
                print(f"skipped Go cmdstalk: {why}", flush=True)
                names.remove("go")
        figures = []
        for name in names:
            print(f"measuring {label(name, per_tube)} on {tubes} tubes ...", flush=True)
            figures.append(measure(name, tubes, per_tube, seconds, go_bin, Path(tmp)))
        report(figures, tubes, per_tube, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
