"""Fixtures for the binlog tests: pure Python on temporary directories, no server."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_binlog_warnings(caplog: pytest.LogCaptureFixture) -> None:
    # Recovery warns about every damage it repairs; the corruption drills cause hundreds.
    caplog.set_level(logging.ERROR, logger="cmdstalk_py.server.binlog")
