"""The real ``cmdstalk`` process with --events, --metrics, JSON logs and NOTIFY_SOCKET, and the
systemd unit's own command line and environment file, run for real."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import BeanstalkServer, free_port, wait_until
from tests.ops.procs import notify_listener, stop_process
from tests.ops.units import ENV_EXAMPLE, VENV_BIN, WORKER_UNIT, exec_argv, read_env_file, read_unit

CMDSTALK = str(VENV_BIN / "cmdstalk")
# --metrics needs prometheus-client (the metrics extra); without it those tests skip.
needs_metrics = pytest.mark.skipif(
    importlib.util.find_spec("prometheus_client") is None, reason="the metrics extra is absent"
)


def base_env() -> dict[str, str]:
    # Only what a service manager would pass: no CMDSTALK_* leaking in from the test runner.
    return {k: v for k, v in os.environ.items() if not k.startswith(("CMDSTALK_", "NOTIFY_"))}


def event_lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def metric(port: int, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


@needs_metrics
def test_events_metrics_json_logs_and_notify(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    events, rotated = tmp_path / "events.jsonl", tmp_path / "events.jsonl.1"
    port = free_port()
    producer = real_beanstalkd.client(use="ops")
    with notify_listener() as notify, open(tmp_path / "stderr", "wb") as err:
        env = base_env() | {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000"}
        proc = subprocess.Popen(
            [CMDSTALK, "--address", real_beanstalkd.address, "--tubes", "ops", "--per-tube", "2",
             "--cmd", "tr a-z A-Z", "--events", str(events), "--metrics", f"127.0.0.1:{port}",
             "--log-format", "json"],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            notify.wait_for("READY=1", proc)
            for i in range(3):
                producer.put(f"hello {i}".encode(), ttr=30)
            wait_until(lambda: len(event_lines(events)) == 3, timeout=30, message="3 events")
            records = event_lines(events)
            assert {r["outcome"] for r in records} == {"deleted"}
            tails = sorted(str(r["stdout_tail"]) for r in records)
            assert tails == ["HELLO 0", "HELLO 1", "HELLO 2"]
            assert {r["pid"] for r in records} == {proc.pid}
            assert {r["tube"] for r in records} == {"ops"} and next(iter(records[0])) == "schema"

            assert metric(port, "cmdstalk_jobs_finished_total", tube="ops", outcome="deleted") == 3
            assert metric(port, "cmdstalk_job_duration_seconds_count", tube="ops") == 3
            at = {"server": real_beanstalkd.address}  # queue gauges are per server
            wait_until(
                lambda: metric(port, "cmdstalk_tube_jobs", tube="ops", state="ready", **at) == 0
                and metric(port, "cmdstalk_tube_waiting_clients", tube="ops", **at) == 2,
                timeout=30, message="queue gauges: empty tube, two brokers waiting",
            )  # fmt: skip
            wait_until(
                lambda: metric(port, "cmdstalk_brokers_idle", tube="ops") == 2,
                timeout=30, message="two idle brokers",
            )  # fmt: skip
            notify.wait_for("WATCHDOG=1")

            # logrotate: move the file away and signal; the next job lands in a new file.
            events.rename(rotated)
            proc.send_signal(signal.SIGHUP)
            producer.put(b"after rotation", ttr=30)
            wait_until(lambda: len(event_lines(events)) == 1, timeout=30, message="new file")
            assert event_lines(events)[0]["stdout_tail"] == "AFTER ROTATION"
            assert len(event_lines(rotated)) == 3
            assert proc.poll() is None  # SIGHUP reopened the log, it did not stop cmdstalk

            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            notify.wait_for("STOPPING=1")
            assert notify.messages.index("READY=1") < notify.messages.index("STOPPING=1")
        finally:
            stop_process(proc)
    with pytest.raises(urllib.error.URLError):
        metric(port, "cmdstalk_queue_stats_up")
    logs = [json.loads(line) for line in (tmp_path / "stderr").read_text().splitlines()]
    assert all({"ts", "level", "logger", "msg"} <= set(entry) for entry in logs)
    job_logs = [e for e in logs if e.get("job_id") is not None]
    assert job_logs and all(e["tube"] == "ops" and e["slot"] in (0, 1) for e in job_logs)


def test_events_to_stdout(real_beanstalkd: BeanstalkServer) -> None:
    real_beanstalkd.client(use="out").put(b"to stdout", ttr=30)
    out = subprocess.run(
        [CMDSTALK, "--address", real_beanstalkd.address, "--tubes", "out", "--cmd", "cat",
         "--events", "-", "--max-jobs", "1"],
        env=base_env(), capture_output=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.decode().splitlines()
    record = json.loads(line)
    assert (record["outcome"], record["stdout_tail"]) == ("deleted", "to stdout")


@needs_metrics
def test_systemd_unit_command_line_for_real(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    """cmdstalk@pool1 as systemd would start it: ExecStart=, the example env file, notify."""
    logs_dir = tmp_path / "log"  # stands in for LogsDirectory=/var/log/cmdstalk
    logs_dir.mkdir()
    metrics_port = free_port()
    unit_env = read_env_file(ENV_EXAMPLE) | {
        "CMDSTALK_ADDRESS": real_beanstalkd.address,
        "CMDSTALK_TUBES": "pool1,pool1b",
        "CMDSTALK_PER_TUBE": "1",
        # Job commands must not inherit the notify socket (they could speak for the service).
        "CMDSTALK_CMD": 'cat >/dev/null; echo "done $CMDSTALK_JOB_ID ${NOTIFY_SOCKET:-none}'
        ' ${WATCHDOG_USEC:-none}"',
        "CMDSTALK_METRICS": f"127.0.0.1:{metrics_port}",
        "CMDSTALK_ARGS": "--max-jobs 2",  # recycling: exits 0 by itself after two jobs
    }
    argv = exec_argv(read_unit(WORKER_UNIT), "pool1", unit_env)
    argv = [a.replace("/var/log/cmdstalk", str(logs_dir)) for a in argv]
    argv[0] = CMDSTALK
    producer = real_beanstalkd.client(use="pool1")
    with notify_listener() as notify:
        env = base_env() | unit_env | {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000"}
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            notify.wait_for("READY=1", proc)
            producer.put(b"one", ttr=30)
            producer.use("pool1b")
            producer.put(b"two", ttr=30)
            assert proc.wait(timeout=60) == 0
            notify.wait_for("STOPPING=1")
        finally:
            stop_process(proc)
            stderr = proc.stderr.read().decode() if proc.stderr else ""
            if proc.stderr:
                proc.stderr.close()
    records = event_lines(logs_dir / "pool1.events.jsonl")
    assert sorted(str(r["tube"]) for r in records) == ["pool1", "pool1b"], stderr
    assert all(r["outcome"] == "deleted" for r in records)
    assert all(str(r["stdout_tail"]) == f"done {r['job_id']} none none\n" for r in records)
    # CMDSTALK_LOG_FORMAT=json from the env file: every stderr line is a JSON object.
    assert stderr and all(json.loads(line)["msg"] is not None for line in stderr.splitlines())


def test_ready_with_max_jobs_below_broker_count(
    real_beanstalkd: BeanstalkServer, tmp_path: Path
) -> None:
    """Type=notify with --max-jobs smaller than the pool: READY=1 must still come, or systemd
    fails the start after TimeoutStartSec."""
    with notify_listener() as notify:
        env = base_env() | {"NOTIFY_SOCKET": notify.path}
        proc = subprocess.Popen(
            [CMDSTALK, "--address", real_beanstalkd.address, "--tubes", "a,b", "--per-tube", "4",
             "--cmd", "cat", "--max-jobs", "2"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            notify.wait_for("READY=1", proc, timeout=30)
        finally:
            stop_process(proc)
