"""Fairness under pipelining: another client's worst latency during a pipelined burst.

One connection (the *burst*) writes thousands of commands in one go: ``watch`` of as many
distinct tubes, or ``reserve-with-timeout 0`` on an empty tube. Meanwhile a second
connection (the *probe*) runs put → reserve → delete request/response cycles on its own
tube and records the slowest single request. A server that serves its connections in turn
answers the probe within a small share of the burst; one that runs a whole read's
commands before looking at anyone else makes the probe wait for all of them.

Also here: a command's CPU cost must not grow with the connection's state. ``watch`` with
many tubes already watched, and ``reserve-with-timeout 0`` polls while holding many
reservations, each against the same command on a fresh connection, same server kind, same
run (the ratio's target: ``SCALING_LIMIT``).

Used by ``benchmarks/server.py --fairness`` and by tests/server/test_fairness.py.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from server_procs import ServerKind, start_server
from server_report import Figure, Goal

HOST = "127.0.0.1"
#: Bursts as (command, count): a client watching many tubes, one polling an empty tube.
#: beanstalkd's own ``watch`` is quadratic in the tubes watched (a list scan per command),
#: so more watches mostly measure beanstalkd's patience.
BURSTS = (("watch", 20_000), ("reserve-with-timeout 0", 20_000))
QUICK_BURSTS = (("watch", 2_000), ("reserve-with-timeout 0", 2_000))
#: Short names for the table.
_LABELS = {"watch": "watch", "reserve-with-timeout 0": "reserve 0s"}
#: Seconds to give up on a burst or a probe request (a broken server, not a slow one).
GIVE_UP = 300.0
#: Scaling: (command, the connection's state before it: tubes watched or jobs reserved).
SCALING = (("watch", 100_000), ("poll holding", 20_000))
QUICK_SCALING = (("watch", 10_000), ("poll holding", 2_000))
#: Commands measured at each state.
SCALING_COMMANDS = 2_000
#: CPU per command with the large state over CPU per command without: linear code stays
#: near 1 (quadratic code was at tens to hundreds with these states).
SCALING_LIMIT = 2.0


@dataclass(frozen=True)
class FairnessSample:
    """One burst against one server, and what the probe saw meanwhile."""

    burst: str
    commands: int
    burst_seconds: float  # from the burst's write to its last reply
    probe_requests: int  # probe requests answered while the burst ran
    probe_worst: float  # the slowest of them, seconds
    probe_median: float

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def burst_bytes(burst: str, commands: int) -> bytes:
    """The burst's commands, all in one buffer (one write)."""
    if burst == "watch":
        return b"".join(b"watch fair-%d\r\n" % i for i in range(commands))
    return (burst.encode() + b"\r\n") * commands


class _Probe(threading.Thread):
    """put → reserve → delete on its own connection until told to stop."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(address, timeout=GIVE_UP)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.latencies: list[float] = []
        self.recording = threading.Event()
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._request(b"use fair-probe\r\n")
        self._request(b"watch fair-probe\r\n")
        self._request(b"ignore default\r\n")

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the probe connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _request(self, data: bytes) -> bytes:
        t0 = time.perf_counter()
        self.sock.sendall(data)
        line = self._line()
        if line.startswith(b"RESERVED"):
            self._line()  # the body
        if self.recording.is_set():
            self.latencies.append(time.perf_counter() - t0)
        return line

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self._request(b"put 0 0 60 1\r\nx\r\n")
                job = self._request(b"reserve\r\n").split()[1]
                self._request(b"delete " + job + b"\r\n")
                self.ready.set()
        except BaseException as exc:  # reported by the caller
            self.error = exc
            self.ready.set()
        finally:
            self.sock.close()


def _send_all(sock: socket.socket, data: bytes, failed: list[BaseException]) -> None:
    try:
        sock.sendall(data)
    except BaseException as exc:  # reported by the caller
        failed.append(exc)


def _read_replies(sock: socket.socket, count: int) -> None:
    seen = 0
    while seen < count:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"the server closed the burst connection after {seen} replies")
        seen += chunk.count(b"\n")


def measure(address: tuple[str, int], burst: str, commands: int) -> FairnessSample:
    """Run one burst of ``commands`` against the server at ``address`` with the probe on."""
    data = burst_bytes(burst, commands)
    probe = _Probe(address)
    sock = socket.create_connection(address, timeout=GIVE_UP)
    failed: list[BaseException] = []
    writer = threading.Thread(target=_send_all, args=(sock, data, failed), daemon=True)
    try:
        probe.start()
        probe.ready.wait(GIVE_UP)
        probe.recording.set()
        t0 = time.perf_counter()
        # The writer blocks while the server reads; replies are read here meanwhile.
        writer.start()
        _read_replies(sock, commands)
        elapsed = time.perf_counter() - t0
    finally:
        probe.stopping.set()
        sock.close()
        probe.join(GIVE_UP)
        writer.join(GIVE_UP)
    if probe.error is not None:
        raise probe.error
    if failed:
        raise failed[0]
    # The probe's request in flight when the burst ended counts too (it joined above).
    lat = sorted(probe.latencies)
    return FairnessSample(
        burst=burst, commands=commands, burst_seconds=elapsed, probe_requests=len(lat),
        probe_worst=lat[-1] if lat else 0.0, probe_median=lat[len(lat) // 2] if lat else 0.0,
    )


def fairness_suite(kinds: list[ServerKind], bursts: Sequence[tuple[str, int]]) -> list[Figure]:
    """Each burst against each server kind (fresh servers, kinds interleaved): the probe's
    worst latency, bundled against the real beanstalkd."""
    figures: list[Figure] = []
    for burst, commands in bursts:
        figure = Figure(
            f"fairness_{burst.split()[0]}", f"worst wait, {commands:,} x {_LABELS[burst]}", "ms",
            Goal.LATENCY,
        )
        for kind in kinds:
            server = start_server(kind)
            try:
                sample = measure(server.address, burst, commands)
            finally:
                server.stop()
            figure.values[kind.name] = sample.probe_worst
            figure.details[kind.name] = sample.as_dict()
            print(f"  {figure.label:<32} {kind.name:<10} worst {sample.probe_worst * 1000:8.1f} ms"
                  f" (median {sample.probe_median * 1000:.1f} ms over {sample.probe_requests}"
                  f" requests; burst {sample.burst_seconds:.2f} s)", file=sys.stderr, flush=True)
        figures.append(figure)
    return figures


def _scaling_bytes(command: str, state: int) -> tuple[bytes, int, bytes]:
    """(setup, its reply lines, the measured commands) for ``command`` at ``state``."""
    if command == "watch":
        setup = b"".join(b"watch s-%d\r\n" % i for i in range(state))
        measured = b"".join(b"watch m-%d\r\n" % i for i in range(SCALING_COMMANDS))
        return setup, state, measured
    # Reservations held: put them, then reserve them all (a RESERVED reply is two lines).
    setup = b"put 0 0 600 1\r\nx\r\n" * state + b"reserve-with-timeout 0\r\n" * state
    return setup, 3 * state, b"reserve-with-timeout 0\r\n" * SCALING_COMMANDS


def cpu_per_command(kind: ServerKind, command: str, state: int) -> float:
    """The server's CPU seconds per ``command`` at ``state``, on a fresh server."""
    setup, setup_lines, measured = _scaling_bytes(command, state)
    server = start_server(kind)
    try:
        sock = socket.create_connection(server.address, timeout=GIVE_UP)
        with sock:
            for data, lines in ((setup, setup_lines), (measured, SCALING_COMMANDS)):
                failed: list[BaseException] = []
                writer = threading.Thread(target=_send_all, args=(sock, data, failed),
                                          daemon=True)
                before = server.sched_seconds()[0]
                writer.start()
                _read_replies(sock, lines)
                used = server.sched_seconds()[0] - before
                writer.join(GIVE_UP)
                if failed:
                    raise failed[0]
        return used / SCALING_COMMANDS
    finally:
        server.stop()


def scaling_suite(kinds: list[ServerKind], scaling: Sequence[tuple[str, int]]) -> list[Figure]:
    """Per command: CPU at the large state over CPU on a fresh connection, each kind."""
    figures: list[Figure] = []
    for command, state in scaling:
        label = f"cpu/cmd, {command} {state:,} vs 0"
        figure = Figure(f"scaling_{command.split()[0]}", label, "x", Goal.LIMIT,
                        limit=SCALING_LIMIT)
        for kind in kinds:
            empty = cpu_per_command(kind, command, 0)
            full = cpu_per_command(kind, command, state)
            figure.values[kind.name] = full / empty
            figure.details[kind.name] = {"empty": empty, "full": full}
            print(f"  {label:<32} {kind.name:<10} {full * 1e6:8.1f} vs {empty * 1e6:.1f} µs",
                  file=sys.stderr, flush=True)
        figures.append(figure)
    return figures
