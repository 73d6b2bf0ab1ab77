"""The ``CMDSTALK_*`` environment a job's command gets: who the job is, never its payload.

Two more are added where the command is started (``cmdstalk_py.process``):
``CMDSTALK_RUN``, the run marker that lets kills find its escaped descendants, and
``CMDSTALK_CONTROL_FD`` (``3``), the descriptor of its control channel: one-line requests
``touch``, ``retry-after SECONDS``, ``bury``, ``progress TEXT`` (``process/control.py``;
what each does: ``supervisor/jobrun.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import greenstalk


def idempotency_key(body: bytes) -> str:
    """``sha256:`` + the body's hex digest: the same string as Spark's ``with_idempotency_key``.

    For at-least-once producers: a retried put re-sends the same bytes, so duplicates share
    the key and a command can deduplicate on it.
    """
    return "sha256:" + hashlib.sha256(body).hexdigest()


def job_environment(
    base: Mapping[str, str], job_id: int, tube: str, stats: greenstalk.StatsJob, body: bytes
) -> dict[str, str]:
    """``base`` (the supervisor's environment) plus the job's ``CMDSTALK_*`` variables."""
    return {
        **base,
        "CMDSTALK_JOB_ID": str(job_id),
        "CMDSTALK_TUBE": tube,
        "CMDSTALK_PRIORITY": str(stats["pri"]),
        "CMDSTALK_TTR": str(stats["ttr"]),
        "CMDSTALK_RELEASES": str(stats["releases"]),
        "CMDSTALK_TIMEOUTS": str(stats["timeouts"]),
        "CMDSTALK_RESERVES": str(stats["reserves"]),
        "CMDSTALK_AGE": str(stats["age"]),
        "CMDSTALK_IDEMPOTENCY_KEY": idempotency_key(body),
    }
