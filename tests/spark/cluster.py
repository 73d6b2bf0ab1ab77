"""A Spark standalone cluster for tests: a master and two 1-core workers on 127.0.0.1.

Started from pyspark's own ``spark-class`` (no separate Spark install), each worker with a
work directory of its own (executors run there, as on a real cluster: not in the driver's
working directory), torn down in ``finally``. The CLI under test is run as a subprocess
with ``--master spark://...``: that process is the driver.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import free_port, wait_until


@dataclass
class Cluster:
    """A running standalone cluster: its master URL, web UI, and processes."""

    master: str
    ui: str
    root: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self) -> dict[str, object]:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(self.ui + "/json/", timeout=5) as resp:
            data: dict[str, object] = json.loads(resp.read())
            return data

    def alive_workers(self) -> int:
        workers = self.state().get("workers", [])
        assert isinstance(workers, list)
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def env(self) -> dict[str, str]:
        """The environment for a driver process: this interpreter, bound to loopback."""
        return {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def java_missing() -> bool:
    return shutil.which("java") is None and not os.environ.get("JAVA_HOME")


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    # The whole process group: spark-class execs java, which may have children.
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(15)


@contextmanager
def standalone_cluster(root: Path, workers: int = 2) -> Iterator[Cluster]:
    """Start the master and ``workers`` 1-core workers; wait until all registered."""
    port, ui_port = free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false",
    }
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", root)
    base = [str(spark_class())]
    try:
        cluster.procs.append(
            _start(
                [*base, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui_port)],
                root / "master.log", env,
            )
        )  # fmt: skip

        def master_up() -> bool:
            try:
                cluster.state()
            except OSError:
                return False
            return True

        wait_until(master_up, 120, interval=0.5, message="spark master up")
        for i in range(workers):
            work = root / f"worker{i}"
            work.mkdir(parents=True, exist_ok=True)
            cluster.procs.append(
                _start(
                    [*base, "org.apache.spark.deploy.worker.Worker", cluster.master,
                     "--cores", "1", "--memory", "1g", "--host", "127.0.0.1",
                     "--webui-port", "0", "--work-dir", str(work)],
                    root / f"worker{i}.log", env,
                )
            )  # fmt: skip
        wait_until(lambda: cluster.alive_workers() == workers, 120, interval=0.5, message="workers")
        yield cluster
    finally:
        for proc in reversed(cluster.procs):
            _stop(proc)


def executor_pids(cluster: Cluster) -> list[int]:
    """Process ids of the executors the workers run now (CoarseGrainedExecutorBackend)."""
    out = subprocess.run(
        ["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    pids = [int(p) for p in out.stdout.split()]
    ours = []
    for pid in pids:
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(cluster.root)):
            ours.append(pid)
    return ours


def run_quick_bench(bench: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """A Spark benchmark's ``--quick`` run (it starts its own servers and cluster), its
    results saved to ``out``; fails the test with the output's tails unless it exits 0."""
    import pytest

    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    proc = subprocess.run(
        [sys.executable, str(bench), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def bench_marks() -> list[object]:
    """The marks of a Spark benchmark's smoke test: slow, on a cluster, skipped without
    beanstalkd or Java."""
    import pytest

    from tests.helpers import beanstalkd_path

    return [
        pytest.mark.spark,
        pytest.mark.spark_cluster,
        pytest.mark.slow,
        pytest.mark.timeout(600),
        pytest.mark.skipif(beanstalkd_path() is None, reason="beanstalkd not found"),
        pytest.mark.skipif(java_missing(), reason="Java not found: Spark needs a JDK (17+)"),
    ]
