"""``Extras``: the options that wire things around the supervisor (no heavy imports: the
command line builds one before deciding whether anything runs at all)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cmdstalk_py.supervisor.config import Config


@dataclass(frozen=True)
class Extras:
    """Options that wire things around the supervisor rather than configure brokers."""

    embedded: bool = False
    embedded_max_job_size: int | None = None
    binlog: str | None = None  # the embedded server's -b DIR
    binlog_fsync_ms: int = 50  # -f MS
    binlog_no_fsync: bool = False  # -F
    binlog_size: int | None = None  # -s BYTES
    log_format: str = "text"
    log_level: str = "INFO"
    events: str | None = None
    metrics: str | None = None
    # --config: what SIGHUP reads the pools from again (None: no reload)
    reload: Callable[[], Sequence[Config]] | None = None
    http: str | None = None  # the dashboard's HOST:PORT
    http_token: str | None = None
    http_allow_host: tuple[str, ...] = ()  # Host names the dashboard answers besides its own
    limits_via: str = "auto"  # auto|cgroup|proc: what enforces the limits (process.cgroup)
