"""cmdstalk on Spark: enqueue DataFrames, analyse event logs, export dead letters, drain.

Installed with the ``spark`` extra (pyspark, pyarrow, pandas, matplotlib) and imported only
when used: nothing here is imported by the ``cmdstalk`` supervisor or ``cmdstalk-server``.
The public API is importable from this package (``from cmdstalk_py.spark import enqueue``);
each name loads its module, and pyspark, on first use, so ``cmdstalk-spark --help`` stays
fast. Importing the package registers the ``beanstalkd`` data source on the active
SparkSession, if there is one; ``register(spark)`` does it for a session started later
(``spark_session`` and ``enqueue`` register it themselves).

Modules:

- ``cli``: the ``cmdstalk-spark`` command line (Spark imported inside each command;
  ``drainopts``: ``drain``'s supervisor options and the ``Config`` they build;
  ``deadcmds``: the ``export-buried`` and ``requeue`` commands);
  ``preflight``: what each command checks before Spark starts (input files and their first
  bytes, the report's paths, the drain's paths); ``session``: a local-friendly SparkSession;
  ``progress``: progress lines on a terminal; ``errors``: one line for a Spark failure (the
  innermost cause).
- ``datasource``: the ``beanstalkd`` data source, ``enqueue``, ``enqueue_stream`` and
  ``with_idempotency_key``; ``writeresult``: per-partition commit messages, the write's
  summary and ``EnqueueFailed`` (failed puts are not retried by Spark); ``putter``:
  pipelined puts in bounded windows (no Spark; the protocol itself is
  ``cmdstalk_py.client``'s); ``inputs``: ``enqueue``'s input files (RFC 4180 CSV, checked
  strictly before any job is put).
- ``eventlog``: reading the supervisor's event log (job records v1, v2 and v4; the tube
  records of v3 skipped) with a fixed schema;
  ``report``: metrics per tube and window and the files ``report`` writes; ``costs``: what
  jobs cost (peak memory and CPU per tube and window, the costliest jobs); ``windowsize``:
  the window's length, given or chosen from the log's span; ``charts``: its charts (inline
  SVG in the page, PNG files beside it) and HTML page.
- ``deadletters``: buried jobs to Parquet and back.
- ``drain``: cmdstalk's own brokers run as Spark tasks (in ``--cwd``, with the driver's
  environment), results as event-log rows; ``drainplan``: which brokers (tube, server) each
  task runs, by backlog; ``resultstream``: results (and the brokers' warnings) sent to the
  driver as they happen (none lost with an executor); ``drainwatch``: the drain seen
  through the servers (bounded wait for them, backlog per tube, progress lines on the
  driver).
- ``servers``: several servers (``a:11300,b:11300``): the address list, the partition →
  server round robin of ``enqueue``, the check that each answers before anything starts.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cmdstalk_py.spark.datasource import (
        enqueue,
        enqueue_stream,
        register,
        with_idempotency_key,
        write_jobs,
    )
    from cmdstalk_py.spark.deadletters import export_buried, requeue
    from cmdstalk_py.spark.session import spark_session
    from cmdstalk_py.spark.writeresult import EnqueueFailed, EnqueueSummary

_API = {
    "enqueue": "datasource",
    "enqueue_stream": "datasource",
    "register": "datasource",
    "with_idempotency_key": "datasource",
    "write_jobs": "datasource",
    "export_buried": "deadletters",
    "requeue": "deadletters",
    "spark_session": "session",
    "EnqueueFailed": "writeresult",
    "EnqueueSummary": "writeresult",
}
__all__ = [
    "EnqueueFailed",
    "EnqueueSummary",
    "enqueue",
    "enqueue_stream",
    "export_buried",
    "register",
    "requeue",
    "spark_session",
    "with_idempotency_key",
    "write_jobs",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def _register_on_active_session() -> None:
    # Only when the application already runs Spark: importing pyspark here would slow
    # every command line that merely imports the package.
    if "pyspark.sql" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        importlib.import_module(f"{__name__}.datasource").register(active)


_register_on_active_session()
