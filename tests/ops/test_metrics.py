"""Prometheus exporter: scraped over real HTTP, queue gauges from a real server's stats-tube."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmdstalk_py.ops.metrics import MetricsExporter, parse_hostport, start_metrics
from cmdstalk_py.ops.observers import TubeHold
from cmdstalk_py.supervisor.results import JobResult, Outcome
from tests.helpers import BeanstalkServer, free_port, running_beanstalkd, wait_until
from tests.ops.procs import stop_process

# Without the metrics extra the module skips instead of failing the whole collection.
parser = pytest.importorskip("prometheus_client.parser", reason="the metrics extra is absent")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in parser.text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def result(outcome: Outcome, exit_code: int | None = 0, signal: int | None = None) -> JobResult:
    return JobResult(
        job_id=1, tube="work", slot=0, outcome=outcome, started_at=100.0, ended_at=100.75,
        priority=1024, ttr=60, releases=0, timeouts=0, reserves=1, age_s=0, payload_bytes=1,
        exit_code=exit_code, signal=signal,
    )  # fmt: skip


@pytest.fixture
def exporter() -> Iterator[MetricsExporter]:
    # Nothing listens on this address: supervisor-side metrics must not depend on it.
    exp = start_metrics("127.0.0.1:0", f"127.0.0.1:{free_port()}", lambda server: ["work"], 30.0)
    try:
        yield exp
    finally:
        exp.close()


def test_observer_calls_move_the_counters(exporter: MetricsExporter) -> None:
    before = scrape(exporter.port)
    assert value(before, "cmdstalk_jobs_finished_total", tube="work", outcome="deleted") is None
    exporter.job_finished(result(Outcome.DELETED))
    exporter.job_finished(result(Outcome.DELETED))
    exporter.job_finished(result(Outcome.RELEASED, exit_code=1))
    exporter.job_finished(result(Outcome.PRECHECK_BURIED, exit_code=None))  # never ran
    exporter.job_finished(result(Outcome.TIMEOUT_BURIED, exit_code=None, signal=9))
    for slot in range(3):
        exporter.broker_busy("work", slot, False)
    exporter.broker_busy("work", 1, True)
    exporter.broker_busy("work", 1, True)  # repeated: must not count twice
    exporter.reserve_waited("work", 0.02)
    exporter.reconnected("work:1", "127.0.0.1:11300")
    exporter.reconnected("dispatcher", "127.0.0.1:11300")
    exporter.process_killed("work", "SIGTERM")
    exporter.process_killed("work", "SIGKILL")
    exporter.process_killed("work", "SIGKILL")
    s = scrape(exporter.port)
    assert value(s, "cmdstalk_jobs_finished_total", tube="work", outcome="deleted") == 2
    assert value(s, "cmdstalk_jobs_finished_total", tube="work", outcome="released") == 1
    assert value(s, "cmdstalk_jobs_finished_total", tube="work", outcome="precheck_buried") == 1
    assert value(s, "cmdstalk_job_duration_seconds_count", tube="work") == 4
    assert value(s, "cmdstalk_job_duration_seconds_sum", tube="work") == pytest.approx(3.0)
    assert value(s, "cmdstalk_job_duration_seconds_bucket", tube="work", le="0.5") == 0
    assert value(s, "cmdstalk_job_duration_seconds_bucket", tube="work", le="1.0") == 4
    assert value(s, "cmdstalk_brokers_busy", tube="work") == 1
    assert value(s, "cmdstalk_brokers_idle", tube="work") == 2
    assert value(s, "cmdstalk_reserve_wait_seconds_count", tube="work") == 1
    assert value(s, "cmdstalk_reconnects_total", where="work:1") == 1
    assert value(s, "cmdstalk_reconnects_total", where="dispatcher") == 1
    assert value(s, "cmdstalk_process_kills_total", tube="work", signal="SIGKILL") == 2
    assert value(s, "cmdstalk_process_kills_total", tube="work", signal="SIGTERM") == 1
    exporter.broker_busy("work", 1, False)
    assert value(scrape(exporter.port), "cmdstalk_brokers_busy", tube="work") == 0


def test_queue_gauges_follow_stats_tube(beanstalk: BeanstalkServer) -> None:
    watched = ["work", "other"]
    at = {"server": beanstalk.address}
    exp = start_metrics(
        "127.0.0.1:0", beanstalk.address, lambda server: list(watched), interval=0.05
    )
    try:
        producer = beanstalk.client(use="work", watch="work")
        waiter = beanstalk.client(watch="work")
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(waiter.reserve(timeout=20)))
        t.start()
        wait_until(
            lambda: value(scrape(exp.port), "cmdstalk_tube_waiting_clients", tube="work", **at)
            == 1,
            timeout=10, message="one client waiting on work",
        )  # fmt: skip
        producer.put(b"wake up")
        t.join(timeout=10)
        waiter.delete(got[0])  # type: ignore[arg-type]

        producer.put(b"a", priority=0)
        producer.put(b"b")
        producer.put(b"c")
        worker = beanstalk.client(watch="work")
        worker.reserve(timeout=1)  # a (most urgent) -> reserved
        worker.bury(worker.reserve(timeout=1))  # b -> buried
        producer.put(b"d", priority=5)
        producer.put(b"e", delay=100)
        producer.put(b"f", delay=100)
        expected = {"ready": 2, "delayed": 2, "buried": 1, "reserved": 1}

        def gauges_match() -> bool:
            s = scrape(exp.port)
            return all(
                value(s, "cmdstalk_tube_jobs", tube="work", **at, state=k) == v
                for k, v in expected.items()
            ) and value(s, "cmdstalk_tube_urgent_jobs", tube="work", **at) == 1

        wait_until(gauges_match, timeout=10, message="gauges equal stats-tube")
        s = scrape(exp.port)
        assert value(s, "cmdstalk_queue_stats_up", **at) == 1
        assert value(s, "cmdstalk_tube_waiting_clients", tube="work", **at) == 0
        # "other" does not exist on the server (no jobs, nobody watching): no series at all.
        assert not [k for k in s if ("tube", "other") in k[1]]

        watched.remove("work")
        wait_until(
            lambda: value(scrape(exp.port), "cmdstalk_tube_jobs", tube="work", state="ready",
                          **at) is None,
            timeout=10, message="gauges of an unwatched tube removed",
        )  # fmt: skip
    finally:
        exp.close()


def test_survives_a_server_that_is_down_then_up() -> None:
    port = free_port()
    at = {"server": f"127.0.0.1:{port}"}
    exp = start_metrics("127.0.0.1:0", f"127.0.0.1:{port}", lambda server: ["work"], interval=0.05)
    try:
        assert not exp.refresh_queue_stats()
        assert value(scrape(exp.port), "cmdstalk_queue_stats_up", **at) == 0
        with running_beanstalkd(port=port) as server:
            server.client(use="work").put(b"x")
            wait_until(
                lambda: value(scrape(exp.port), "cmdstalk_tube_jobs", tube="work", state="ready",
                              **at) == 1,
                timeout=10, message="ready gauge after the server came up",
            )  # fmt: skip
            assert value(scrape(exp.port), "cmdstalk_queue_stats_up", **at) == 1
        wait_until(
            lambda: value(scrape(exp.port), "cmdstalk_queue_stats_up", **at) == 0,
            timeout=10, message="up gauge drops when the server goes away",
        )  # fmt: skip
    finally:
        exp.close()


def test_queue_gauges_of_every_server(beanstalk: BeanstalkServer) -> None:
    """Pools on several servers: each server's queues, labelled with its address, for the
    tubes served on that server only."""
    with running_beanstalkd() as second:
        servers = [beanstalk.address, second.address]
        served = {beanstalk.address: ["work"], second.address: ["work", "other"]}
        exp = start_metrics("127.0.0.1:0", servers, served.__getitem__, interval=0.05)
        try:
            beanstalk.client(use="work").put(b"x")
            for _ in range(2):
                second.client(use="work").put(b"y")
            for server in (beanstalk, second):  # "other" exists on both, served on one
                server.client(use="other").put(b"z")

            def both() -> bool:
                s = scrape(exp.port)
                return [value(s, "cmdstalk_tube_jobs", server=a, tube="work", state="ready")
                        for a in servers] == [1, 2] and all(
                    value(s, "cmdstalk_queue_stats_up", server=a) == 1 for a in servers
                ) and [value(s, "cmdstalk_tube_jobs", server=a, tube="other", state="ready")
                       for a in servers] == [None, 1]  # fmt: skip

            wait_until(both, timeout=10, message="the ready jobs of both servers")
        finally:
            exp.close()


def test_close_stops_the_http_server() -> None:
    exp = start_metrics("127.0.0.1:0", "127.0.0.1:1", lambda server: [], interval=30)
    port = exp.port
    assert scrape(port)
    exp.close()
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def test_busy_port_raises_oserror() -> None:
    exp = start_metrics("127.0.0.1:0", "127.0.0.1:1", lambda server: [], interval=30)
    try:
        with pytest.raises(OSError):
            start_metrics(f"127.0.0.1:{exp.port}", "127.0.0.1:1", lambda server: [])
    finally:
        exp.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9100", ("127.0.0.1", 9100)), (":9100", ("127.0.0.1", 9100)),
     ("[::1]:9100", ("::1", 9100)), ("localhost:0", ("localhost", 0))],
)  # fmt: skip
def test_parse_hostport(text: str, expected: tuple[str, int]) -> None:
    assert parse_hostport(text) == expected


@pytest.mark.parametrize("text", ["9100", "host:", "host:port", "h:70000"])
def test_parse_hostport_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_hostport(text)


def test_pool_tube_and_server_metrics(exporter: MetricsExporter) -> None:
    exporter.job_finished(result(Outcome.DELETED)._replace(pool="img", server="q:11300"))
    exporter.tube_running("img", "thumbs", 2, 2)
    exporter.tube_held(TubeHold("img", "thumbs", "limit", 2, 2, None, None))
    exporter.tube_held(TubeHold("img", "resize", "rate", 0, None, 5.0, 5.0))
    exporter.tube_held(TubeHold("img", "resize", None, 0, None, 5.0, 5.0))
    s = scrape(exporter.port)
    labels = {"pool": "img", "server": "q:11300", "outcome": "deleted"}
    assert value(s, "cmdstalk_server_jobs_finished_total", **labels) == 1
    assert value(s, "cmdstalk_tube_running", pool="img", tube="thumbs") == 2
    assert value(s, "cmdstalk_tube_limit", pool="img", tube="thumbs") == 2
    assert value(s, "cmdstalk_tube_held", pool="img", tube="thumbs", reason="limit") == 1
    assert value(s, "cmdstalk_tube_held", pool="img", tube="thumbs", reason="rate") == 0
    assert value(s, "cmdstalk_tube_held", pool="img", tube="resize", reason="rate") == 0


def _rendered(exp: MetricsExporter) -> Samples:
    text = exp.render()[0].decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in parser.text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_queue_gauges_follow_the_servers_served_now(beanstalk: BeanstalkServer) -> None:
    """A reload may add or drop servers: the exporter follows the function it was given, at
    each heartbeat (background polling) and each on-demand render."""
    beanstalk.client(use="work").put(b"x")
    live = f"127.0.0.1:{beanstalk.port}"
    dead = f"127.0.0.1:{free_port()}"
    served = [live]
    on_demand = MetricsExporter(None, lambda: served, lambda server: ["work"], 0)
    polling = start_metrics("127.0.0.1:0", lambda: served, lambda server: ["work"], 0.05)
    try:
        up = "cmdstalk_queue_stats_up"
        samples = _rendered(on_demand)
        assert value(samples, up, server=live) == 1.0 and value(samples, up, server=dead) is None
        served.append(dead)  # a reload added a server (down, here)
        samples = _rendered(on_demand)
        assert (value(samples, up, server=live), value(samples, up, server=dead)) == (1.0, 0.0)
        ready = "cmdstalk_tube_jobs"
        assert value(samples, ready, server=live, tube="work", state="ready") == 1.0
        polling.heartbeat()
        wait_until(lambda: value(scrape(polling.port), up, server=dead) == 0.0, 10)
        served.remove(live)  # and dropped the first: its series go
        samples = _rendered(on_demand)
        assert value(samples, up, server=live) is None
        assert value(samples, ready, server=live, tube="work", state="ready") is None
        polling.heartbeat()
        gone = scrape(polling.port)
        assert value(gone, up, server=live) is None and value(gone, up, server=dead) == 0.0
    finally:
        on_demand.close()
        polling.close()


MIB = 1 << 20


def test_job_cost_histograms_per_pool_and_tube(exporter: MetricsExporter) -> None:
    ran = result(Outcome.DELETED)._replace(pool="img", peak_memory_bytes=50 * MIB, cpu_s=1.5)
    exporter.job_finished(ran)
    exporter.job_finished(ran._replace(peak_memory_bytes=3 * MIB, cpu_s=0.02))
    # Figures not known: not observed (no zero to drag the quantiles down).
    exporter.job_finished(ran._replace(peak_memory_bytes=None, cpu_s=None))
    exporter.job_finished(ran._replace(peak_memory_bytes=None, cpu_s=0.5))
    s = scrape(exporter.port)
    at = {"pool": "img", "tube": "work"}
    memory, cpu = "cmdstalk_job_peak_memory_bytes", "cmdstalk_job_cpu_seconds"
    assert value(s, memory + "_count", **at) == 2
    assert value(s, memory + "_sum", **at) == 53 * MIB
    assert value(s, memory + "_bucket", **at, le="4.194304e+06") == 1
    assert value(s, memory + "_bucket", **at, le="6.7108864e+07") == 2
    assert value(s, cpu + "_count", **at) == 3
    assert value(s, cpu + "_sum", **at) == pytest.approx(2.02)
    assert value(s, cpu + "_bucket", **at, le="1.0") == 2
    assert value(s, memory + "_count", pool="default", tube="work") is None


def test_job_cost_of_real_jobs(beanstalk: BeanstalkServer, tmp_path: Path) -> None:
    """A real supervisor's jobs: the histograms hold exactly the figures its event log
    gives, a job whose figure is unknown left out."""
    events, port = tmp_path / "events.jsonl", free_port()
    hog = f"{shlex.quote(sys.executable)} -c \"import time; b = b'1' * (60 << 20); time.sleep(1)\""
    producer = beanstalk.client(use="cost")
    for body in (hog, "true", "exit 3"):  # deleted, deleted, buried
        producer.put(body.encode(), ttr=60)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CMDSTALK_", "NOTIFY_"))}
    argv = [sys.executable, "-m", "cmdstalk_py", "--address", beanstalk.address, "--tubes",
            "cost", "--cmd", 'eval "$(cat)"', "--events", str(events), "--metrics",
            f"127.0.0.1:{port}", "--max-memory", "1G", "--bury-exit-codes", "3"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(_records(events)) >= 3, 60, message="3 event records")
        records = _records(events)[:3]
        scraped = wait_until(lambda: _scraped_after(port, len(records)), 30, message="the scrape")
    finally:
        stop_process(proc)
    assert scraped is not None
    s, at = scraped, {"pool": "default", "tube": "cost"}
    peaks = [r["peak_memory_bytes"] for r in records if r["peak_memory_bytes"] is not None]
    cpus = [r["cpu_s"] for r in records if r["cpu_s"] is not None]
    assert max(peaks) >= 60 * MIB  # the hog, sampled under --max-memory
    assert value(s, "cmdstalk_job_peak_memory_bytes_count", **at) == len(peaks)
    assert value(s, "cmdstalk_job_peak_memory_bytes_sum", **at) == sum(peaks)
    assert value(s, "cmdstalk_job_cpu_seconds_count", **at) == len(cpus) == 3
    # The event log rounds CPU to the millisecond.
    assert value(s, "cmdstalk_job_cpu_seconds_sum", **at) == pytest.approx(sum(cpus), abs=0.01)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1]]


def _scraped_after(port: int, jobs: int) -> Samples | None:
    """A scrape once the metrics count ``jobs`` (the event log may be written first)."""
    try:
        s = scrape(port)
    except OSError:
        return None
    finished = "cmdstalk_jobs_finished_total"
    counted = [v for (name, tags), v in s.items() if name == finished and ("tube", "cost") in tags]
    return s if sum(counted) >= jobs else None
