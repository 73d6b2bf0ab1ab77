"""Enqueue failure paths: a failed put is not retried by Spark, and the count is what was put."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import running_beanstalkd

pytestmark = pytest.mark.spark


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``cmdstalk-spark ARGS`` in its own JVM (a session with its own master and settings)."""
    script = Path(sys.executable).parent / "cmdstalk-spark"
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_deterministic_error_is_not_retried_and_the_count_is_what_was_put(
    tmp_path: Path,
) -> None:
    # local[2,4] gives tasks four attempts, as a cluster does: a JOB_TOO_BIG that failed the
    # task used to put the partition's first 1,500 rows four times.
    rows = [{"body": "too big for the server" if i == 1500 else "x"} for i in range(2000)]
    src = tmp_path / "jobs.json"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with running_beanstalkd("-z", "5") as server:
        out = run_cli(
            "--master", "local[2,4]", "enqueue", str(src), "--format", "json",
            "--tube", "t", "--address", server.address, "--partitions", "1",
        )  # fmt: skip
        text = out.stdout + out.stderr
        assert out.returncode == 1, text
        assert "JOB_TOO_BIG" in text and "partition 0" in text, text
        held = int(server.client().stats_tube("t")["total-jobs"])
        found = re.search(r"enqueued (\d+) jobs", text)
        assert found is not None, text
        assert int(found.group(1)) == held, text
        assert 1500 <= held < 2000, text
        assert "Traceback" not in text and len(text.splitlines()) < 10, text


def spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


@pytest.mark.slow
def test_spark_submit_master_and_conf_win_over_the_default(tmp_path: Path) -> None:
    import cmdstalk_py.spark.cli as cli

    src = tmp_path / "jobs.json"
    src.write_text('{"body": "a"}\n{"body": "b"}\n')
    with running_beanstalkd() as server:
        args = ["enqueue", str(src), "--format", "json", "--address", server.address]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        submitted = subprocess.run(
            [str(spark_submit()), "--master", "local[1]", cli.__file__, *args],
            capture_output=True, text=True, timeout=240, check=False, env=env,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        # spark-submit passes the Python program's stderr on to its stdout
        assert "starting Spark (local[1])" in submitted.stdout + submitted.stderr
        by_conf = run_cli(
            "--conf", "spark.master=local[1]", "--conf", "spark.ui.enabled=false", *args
        )
        assert by_conf.returncode == 0, by_conf.stdout + by_conf.stderr
        assert "starting Spark (local[1])" in by_conf.stderr, by_conf.stderr
        assert server.client().stats_tube("default")["total-jobs"] == 4
