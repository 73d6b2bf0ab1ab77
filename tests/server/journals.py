"""A journal for engine tests: records every call, refuses everything while ``fail`` is set."""

from __future__ import annotations

from cmdstalk_py.server.job import Job
from cmdstalk_py.server.journal import JournalError, NullJournal


class RecordingJournal(NullJournal):
    """Records (what, id, state) per call; raises ``JournalError`` while ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False
        self.log: list[tuple[str, int, str]] = []

    def _rec(self, what: str, job: Job) -> None:
        if self.fail:
            raise JournalError("disk full")
        self.log.append((what, job.id, job.state.value))

    def job_put(self, job: Job) -> None:
        self._rec("put", job)

    def job_changed(self, job: Job) -> None:
        self._rec("changed", job)

    def job_deleted(self, job: Job) -> None:
        self._rec("deleted", job)
