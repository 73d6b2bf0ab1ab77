#!/usr/bin/env python3
"""Start-up of the supervisor (issue 26): ``cmdstalk --help``, and the first worker waiting.

Measured in one run, interleaved (a change in the machine's load hits every kind alike),
with the installed console script next to this interpreter (``pip install .``), its
bytecode compiled first as ``pip install`` does:

* ``python -c pass`` with the same interpreter: the floor, and the reference of the target
  (each figure below within ``TARGET_RATIO`` times it, medians);
* ``cmdstalk --help``: Popen to exit;
* the first worker waiting: Popen of ``cmdstalk --address … --tubes T --per-tube 1`` to
  the moment the real beanstalkd counts a connection waiting in ``reserve`` on ``T``
  (``stats-tube``'s ``current-waiting``, asked back to back), then SIGTERM;
* the same for Go cmdstalk (``--go-cmdstalk PATH`` / ``CMDSTALK_GO_BIN``, or built from the
  snapshots as ``idle.py`` does; skipped with the reason without either): for scale only.

Exit status: 0 when everything was measured, 1 with ``--strict`` when a target was missed.

Usage: ``python benchmarks/startup.py [--runs N] [--quick] [--strict]``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import greenstalk
from idle import go_cmdstalk
from server_startup import compile_package, python_pass_seconds

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import BeanstalkServer, running_beanstalkd  # noqa: E402

#: The target: each start-up figure within this many ``python -c pass`` times (medians).
TARGET_RATIO = 3.0
PATIENCE = 30.0
TUBE = "startup"
FULL_RUNS, QUICK_RUNS = 15, 2


def cmdstalk_argv() -> list[str]:
    """The ``cmdstalk`` console script next to this interpreter (else the module)."""
    script = Path(sys.executable).parent / "cmdstalk"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from cmdstalk_py.supervisor.cli import main; main()"]


def help_seconds() -> float:
    t0 = time.perf_counter()
    out = subprocess.run([*cmdstalk_argv(), "--help"], capture_output=True, check=True)
    took = time.perf_counter() - t0
    if b"--per-tube" not in out.stdout:
        raise RuntimeError(f"cmdstalk --help printed no --per-tube: {out.stdout[:200]!r}")
    return took


def first_waiting_seconds(argv: list[str], server: BeanstalkServer) -> float:
    """Popen of ``argv`` to the first connection waiting in reserve on ``TUBE``."""
    with greenstalk.Client((server.host, server.port)) as probe:
        probe.use(TUBE)  # the tube exists (stats-tube answers) before the worker starts
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            while True:
                if probe.stats_tube(TUBE)["current-waiting"] >= 1:
                    return time.perf_counter() - t0
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    raise RuntimeError(f"{argv[0]} exited with {proc.returncode}: {err[-500:]}")
                if time.perf_counter() - t0 > PATIENCE:
                    raise RuntimeError(f"{argv[0]}: no worker waiting within {PATIENCE} s")
                os.sched_yield()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            # Its connection gone from the server's count before the next run asks.
            deadline = time.perf_counter() + PATIENCE
            while (probe.stats_tube(TUBE)["current-waiting"] != 0
                   and time.perf_counter() < deadline):  # fmt: skip
                time.sleep(0.001)


def ours_argv(server: BeanstalkServer) -> list[str]:
    return [*cmdstalk_argv(), "--address", f"{server.host}:{server.port}", "--tubes", TUBE,
            "--per-tube", "1", "--cmd", "cat >/dev/null", "--log-level", "warning"]  # fmt: skip


def go_argv(binary: str, server: BeanstalkServer) -> list[str]:
    return [binary, f"-address={server.host}:{server.port}", f"-tubes={TUBE}",
            "-per-tube=1", "-cmd=cat >/dev/null"]  # fmt: skip


def measure(runs: int, go: str | None) -> dict[str, list[float]]:
    """Every kind's seconds, interleaved."""
    samples: dict[str, list[float]] = {"python -c pass": [], "cmdstalk --help": [],
                                       "first worker waiting": []}  # fmt: skip
    if go is not None:
        samples["Go cmdstalk: first worker waiting"] = []
    with running_beanstalkd() as server:
        kinds: list[tuple[str, Callable[[], float]]] = [
            ("python -c pass", python_pass_seconds),
            ("cmdstalk --help", help_seconds),
            ("first worker waiting", lambda: first_waiting_seconds(ours_argv(server), server)),
        ]
        if go is not None:
            kinds.append(("Go cmdstalk: first worker waiting",
                          lambda: first_waiting_seconds(go_argv(go, server), server)))
        for _ in range(runs):
            for name, fn in kinds:
                samples[name].append(fn())
    return samples


def report(samples: dict[str, list[float]]) -> tuple[str, list[str]]:
    """The printed table, and the targets missed."""
    floor = statistics.median(samples["python -c pass"])
    lines = [f"{'':<36}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'× python':>10}"]
    for name, values in samples.items():
        med = statistics.median(values)
        lines.append(f"{name:<36}{med * 1000:>10.1f}{min(values) * 1000:>9.1f}"
                     f"{max(values) * 1000:>9.1f}{med / floor:>10.2f}")  # fmt: skip
    missed = []
    for name in ("cmdstalk --help", "first worker waiting"):
        ratio = statistics.median(samples[name]) / floor
        ok = ratio <= TARGET_RATIO
        lines.append(f"{name} / python -c pass: {ratio:.2f} (target <= {TARGET_RATIO:g})"
                     f"  {'PASS' if ok else 'FAIL'}")  # fmt: skip
        if not ok:
            missed.append(name)
    return "\n".join(lines), missed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--runs", type=int, default=FULL_RUNS)
    p.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} runs, no Go")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--go-cmdstalk", default=os.environ.get("CMDSTALK_GO_BIN"),
                   help="a ready Go cmdstalk binary (or CMDSTALK_GO_BIN)")
    p.add_argument("--go-sources", type=Path,
                   default=Path(os.environ.get("CMDSTALK_GO_SOURCES", "/work/.mirror")),
                   help="where the bare git snapshots of Go cmdstalk and kr/beanstalk are")
    args = p.parse_args()
    compile_package()
    runs = QUICK_RUNS if args.quick else args.runs
    with tempfile.TemporaryDirectory() as tmp:
        go, why = (None, "--quick") if args.quick else go_cmdstalk(
            args.go_cmdstalk, args.go_sources, Path(tmp))
        print(f"supervisor start-up: {runs} runs, interleaved; "
              f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
        if go is None:
            print(f"Go cmdstalk skipped: {why}")
        table, missed = report(measure(runs, go))
    print(table)
    if args.strict and missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
