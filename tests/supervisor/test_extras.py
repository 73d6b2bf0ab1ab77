"""An option whose extra is not installed is one ``Error:`` line naming the extra, exit 2."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import free_port
from tests.supervisor.conftest import cmdstalk_env

# cmdstalk as installed without the metrics extra: the import of prometheus_client fails
# exactly as it does when the package is absent (ModuleNotFoundError).
WITHOUT_PROMETHEUS = (
    "import sys; sys.modules['prometheus_client'] = None; "
    "from cmdstalk_py.supervisor.cli import main; main()"
)


def test_metrics_without_the_extra_is_one_error_line_naming_it() -> None:
    for args, env in [
        (["--metrics", f"127.0.0.1:{free_port()}"], {}),
        ([], {"CMDSTALK_METRICS": f"127.0.0.1:{free_port()}"}),  # the systemd env file way
    ]:
        proc = subprocess.run(
            [sys.executable, "-c", WITHOUT_PROMETHEUS, "--cmd", "cat", "--address",
             "127.0.0.1:1", *args],
            capture_output=True, text=True, timeout=30, env=cmdstalk_env(**env),
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, proc.stderr
        assert "--metrics" in errors[0] and "pip install 'cmdstalk-py[metrics]'" in errors[0]
        assert "Traceback" not in proc.stderr
