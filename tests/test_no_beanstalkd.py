"""Without the real beanstalkd, the tests that need it are skipped with the reason (README)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
from tests.helpers import running_beanstalkd
from tests.server.difftools.servers import real_beanstalkd


def test_through_the_launcher():
    with running_beanstalkd():
        pass


def test_through_the_difftools_target():
    with real_beanstalkd():
        pass


def test_through_the_fixture(real_beanstalkd):
    pass
'''


def test_tests_that_need_beanstalkd_skip_without_it(tmp_path: Path) -> None:
    probe = ROOT / "tests" / f"test_probe_{os.getpid()}_{tmp_path.name}.py"
    probe.write_text(PROBE)
    try:
        env = {**os.environ, "PATH": str(tmp_path), "BEANSTALKD_PATH": ""}
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
             "-p", "no:xdist", str(probe)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        probe.unlink()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 skipped" in out.stdout, out.stdout
    assert "beanstalkd not found: install Debian's beanstalkd" in out.stdout, out.stdout
