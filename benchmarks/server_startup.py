#!/usr/bin/env python3
"""Start-up of the bundled server as a test fixture: its first reply, against references.

Test suites spawn a server per test and soon send it commands; greenstalk's waits 100 ms,
connects, and expects ``reserve-with-timeout 1`` to answer ``TIMED_OUT`` within 50 ms of a
second. A command that arrives while the server is still loading waits in the socket, so
what a suite feels is the time to the first reply.

Measured in one run, interleaved (a change in the machine's load hits every kind alike):

* ``python -c pass`` with the same interpreter: the floor of any Python server, and the
  reference of the target (first reply within ``TARGET_RATIO`` times it, medians);
* ``cmdstalk-server`` (the console script next to this interpreter, else ``python -m
  cmdstalk_py.server``): Popen to the first accepted connection, and to the reply of a
  ``list-tube-used`` sent the moment it accepted;
* the real ``beanstalkd`` the same way, when it is installed;
* greenstalk's rule, as its test fixture applies it: spawn, sleep 100 ms, connect, then
  ``reserve-with-timeout 1`` must answer ``TIMED_OUT`` within a second and
  ``GREENSTALK_SLACK``; how many runs of each server did.

Bytecode is compiled first (``compileall`` of the package, as ``pip install`` does): a
checkout run with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module on every
start. Exit status: 0 when everything was measured, 1 with ``--strict`` when a target was
missed, 2 when a server could not be started or answered wrongly.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from server_procs import ServerKind, ServerStartError, beanstalkd_kind, bundled_kind, free_port

HOST = "127.0.0.1"
#: The target: the bundled server's first reply within this many ``python -c pass`` times.
TARGET_RATIO = 2.0
#: greenstalk's tests accept a ``reserve-with-timeout 1`` answered within 1 s + this.
GREENSTALK_SLACK = 0.050
#: greenstalk's fixture sleeps this long between spawning the server and connecting.
GREENSTALK_SETTLE = 0.100
PATIENCE = 30.0
FULL_RUNS, QUICK_RUNS = 20, 3
FULL_GREENSTALK, QUICK_GREENSTALK = 10, 1


@dataclass
class Runs:
    """The samples of one kind, in seconds."""

    accept: list[float] = field(default_factory=list)
    reply: list[float] = field(default_factory=list)
    greenstalk: list[float] = field(default_factory=list)  # the reply's lateness past 1 s

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name in ("accept", "reply", "greenstalk"):
            values: list[float] = getattr(self, name)
            if values:
                out[name] = {"median": statistics.median(values), "min": min(values),
                             "max": max(values), "runs": values}
        return out


def compile_package() -> Path | None:
    """Write the bytecode of the installed ``cmdstalk_py``; its directory (None if absent)."""
    spec = importlib.util.find_spec("cmdstalk_py")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent
    compileall.compile_dir(str(root), quiet=1)
    return root


def python_pass_seconds() -> float:
    """Popen to exit of ``python -c pass`` (this interpreter, this environment)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def _connect(proc: subprocess.Popen[bytes], port: int, t0: float, name: str) -> socket.socket:
    # Back to back (a refused connect on loopback takes microseconds), yielding the CPU.
    while True:
        if proc.poll() is not None:
            raise ServerStartError(f"{name} exited with {proc.returncode} before accepting")
        s = socket.socket()
        try:
            s.connect((HOST, port))
        except OSError:
            s.close()
            if time.perf_counter() - t0 > PATIENCE:
                raise ServerStartError(f"{name} did not accept within {PATIENCE} s") from None
            os.sched_yield()
            continue
        s.settimeout(PATIENCE)
        return s


def _reply(s: socket.socket, command: bytes, want: bytes, name: str) -> None:
    s.sendall(command)
    got = b""
    while not got.endswith(b"\r\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    if got != want:
        raise ServerStartError(f"{name}: {command!r} was answered {got!r}")


def spawn_and_ask(kind: ServerKind, command: bytes, want: bytes) -> tuple[float, float]:
    """Seconds from just before Popen to the first accepted connection, and from then to
    the reply of ``command`` sent at once."""
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(kind.argv(port), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with _connect(proc, port, t0, kind.name) as s:
            accepted = time.perf_counter()
            _reply(s, command, want, kind.name)
            return accepted - t0, time.perf_counter() - accepted
    finally:
        proc.kill()
        proc.wait()


def greenstalk_lateness(kind: ServerKind) -> float:
    """Seconds past one that ``reserve-with-timeout 1`` took, sent as greenstalk's test
    fixture sends it: 100 ms after spawning the server (a refused connect fails, as there)."""
    port = free_port()
    proc = subprocess.Popen(kind.argv(port), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(GREENSTALK_SETTLE)
        try:
            s = socket.create_connection((HOST, port), timeout=PATIENCE)
        except OSError as exc:
            raise ServerStartError(f"{kind.name} refused greenstalk's connect: {exc}") from None
        with s:
            t0 = time.perf_counter()
            _reply(s, b"reserve-with-timeout 1\r\n", b"TIMED_OUT\r\n", kind.name)
            return time.perf_counter() - t0 - 1.0
    finally:
        proc.kill()
        proc.wait()


def measure(kinds: Sequence[ServerKind], runs: int, greenstalk_runs: int) -> (
    tuple[list[float], dict[str, Runs]]
):
    """``python -c pass`` times, and every kind's runs, interleaved."""
    python: list[float] = []
    results = {k.name: Runs() for k in kinds}
    for _ in range(runs):
        python.append(python_pass_seconds())
        for kind in kinds:
            accept, reply = spawn_and_ask(kind, b"list-tube-used\r\n", b"USING default\r\n")
            results[kind.name].accept.append(accept)
            results[kind.name].reply.append(accept + reply)
    for _ in range(greenstalk_runs):
        for kind in kinds:
            results[kind.name].greenstalk.append(greenstalk_lateness(kind))
    return python, results


def report(python: list[float], results: dict[str, Runs]) -> tuple[str, list[str]]:
    """The printed table, and the targets missed."""
    floor = statistics.median(python)
    lines = [f"{'':<28}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'× python':>10}",
             _row("python -c pass", python, floor)]
    for name, r in results.items():
        lines.append(_row(f"{name}: first accept", r.accept, floor))
        lines.append(_row(f"{name}: first reply", r.reply, floor))
    missed: list[str] = []
    bundled = results.get("bundled")
    if bundled is not None:
        ratio = statistics.median(bundled.reply) / floor
        ok = ratio <= TARGET_RATIO
        lines.append(f"\nbundled first reply / python -c pass: {ratio:.2f}"
                     f" (target <= {TARGET_RATIO:g})  {'PASS' if ok else 'FAIL'}")
        if not ok:
            missed.append("first reply")
    for name, r in results.items():
        if not r.greenstalk:
            continue
        within = sum(1 for late in r.greenstalk if late <= GREENSTALK_SLACK)
        ok = within == len(r.greenstalk)
        lines.append(f"greenstalk's rule, {name}: {within}/{len(r.greenstalk)} answered within"
                     f" 1 s + {GREENSTALK_SLACK * 1000:.0f} ms (worst +"
                     f"{max(r.greenstalk) * 1000:.0f} ms)  {'PASS' if ok else 'FAIL'}")
        if name == "bundled" and not ok:
            missed.append("greenstalk's rule")
    return "\n".join(lines), missed


def _row(label: str, values: list[float], floor: float) -> str:
    median = statistics.median(values)
    return (f"{label:<28}{median * 1000:>10.1f}{min(values) * 1000:>9.1f}"
            f"{max(values) * 1000:>9.1f}{median / floor:>10.2f}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/server_startup.py",
        description="Time to the first reply of cmdstalk-server, python -c pass and beanstalkd.",
    )
    parser.add_argument("--quick", action="store_true", help="a few runs: a smoke run")
    parser.add_argument("--runs", type=int, help=f"start-ups per kind (default {FULL_RUNS})")
    parser.add_argument("--greenstalk-runs", type=int, metavar="N",
                        help=f"runs of greenstalk's rule per server (default {FULL_GREENSTALK})")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also save results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = args.runs or (QUICK_RUNS if args.quick else FULL_RUNS)
    greenstalk_runs = args.greenstalk_runs
    if greenstalk_runs is None:
        greenstalk_runs = QUICK_GREENSTALK if args.quick else FULL_GREENSTALK
    compiled = compile_package()
    kinds = [bundled_kind()]
    real = beanstalkd_kind()
    if real is not None:
        kinds.append(real)
    try:
        python, results = measure(kinds, runs, greenstalk_runs)
    except (ServerStartError, OSError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    table, missed = report(python, results)
    print(f"Start-up to the first reply ({runs} runs, interleaved; {os.cpu_count()} CPUs,"
          f" load {os.getloadavg()[0]:.1f}; bytecode compiled in {compiled})")
    print(table)
    if real is None:
        print("NOTE beanstalkd not found: measured against python -c pass only")
    if args.json:
        report_data = {
            "python_pass": python, "kinds": {k: r.as_dict() for k, r in results.items()},
            "servers": {k.name: list(k.argv_prefix) for k in kinds}, "missed": missed,
            "loadavg": os.getloadavg(), "target_ratio": TARGET_RATIO,
        }
        args.json.write_text(json.dumps(report_data, indent=2) + "\n")
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
