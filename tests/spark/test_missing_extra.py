"""Without the ``spark`` extra, a command says which extra to install: one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The CLI as installed, with pyspark made unimportable (what a missing extra looks like).
WITHOUT_PYSPARK = (
    "import sys; sys.modules['pyspark'] = None; from cmdstalk_py.spark.cli import main; main()"
)


def test_a_command_without_the_spark_extra_names_the_extra(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("")
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYSPARK, "report", "--events", str(events),
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "needs the spark extra (pyspark is not installed)" in lines[0]
    assert "pip install 'cmdstalk-py[spark]'" in lines[0]
