"""Evidence that the load generator is not the bottleneck (``server.py --saturation``).

Each workload is run against one server while the load generator's own knobs are turned
up: pipeline depth for the pipelined workloads, processes for the 16 request/response
clients. If the server's throughput stops rising and its demand (running + waiting for a
CPU) stays near 100 %, more load-generator capacity would not raise the figure: the server,
not the client, sets it.
"""

from __future__ import annotations

from typing import Protocol

from server_measure import Sample, cycles, drain, pipelined_puts
from server_procs import ServerKind, start_server

PUT_WINDOWS = (10, 100, 1000, 2000, 4000)
DRAIN_WINDOWS = (1, 8, 64, 256, 1024)
CYCLE_CONNS_PER_PROC = (16, 8, 4, 2)


class _Plan(Protocol):
    @property
    def jobs(self) -> int: ...

    @property
    def cycle_seconds(self) -> float: ...


def _row(workload: str, setting: str, sample: Sample) -> str:
    return (
        f"{workload:<30} {setting:<22} {sample.value:>11,.0f}  {sample.server_cpu:>6.0%}"
        f"  {sample.server_demand:>6.0%}  {sample.loadgen_cpu:>7.0%}  {sample.machine_busy:>7.0%}"
    )


def saturation(kind: ServerKind, plan: _Plan) -> str:
    """Sweep the load generator's settings against ``kind``; return the table."""
    head = (
        f"{'workload':<30} {'load generator':<22} {'ops/s':>11}  {'cpu':>6}  {'busy':>6}"
        f"  {'lg cpu':>7}  {'machine':>7}"
    )
    lines = [f"Load-generator saturation sweep against {kind.name}", head, "-" * len(head)]
    server = start_server(kind)
    try:
        # Each pipelined-put run fills a tube that the matching drain run then empties.
        for i, (put_window, drain_window) in enumerate(zip(PUT_WINDOWS, DRAIN_WINDOWS,
                                                           strict=True)):
            tube = f"sat-{i}"
            sample = pipelined_puts(server, tube, plan.jobs, put_window)
            lines.append(_row("pipelined puts, 1 conn", f"window {put_window}", sample))
            sample = drain(server, tube, plan.jobs, window=drain_window)
            lines.append(_row("drain, 4 conns (4 procs)", f"window {drain_window}/conn", sample))
        for per_proc in CYCLE_CONNS_PER_PROC:
            sample = cycles(server, "sat-cycles", 16, plan.cycle_seconds, per_proc)
            procs = 16 // per_proc
            lines.append(_row("put-reserve-delete, 16 conns", f"{procs} procs x {per_proc} conns",
                              sample))
    finally:
        server.stop()
    lines.append("")
    lines.append("cpu: server CPU; busy: server running or waiting for a CPU; lg cpu: load"
                 " generator CPU; machine: all cores busy (1 core = 100%).")
    lines.append("Throughput that stops rising while busy stays near 100% means the server sets"
                 " the figure, not the load generator.")
    return "\n".join(lines)
