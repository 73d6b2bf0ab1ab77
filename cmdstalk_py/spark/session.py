"""A local-friendly SparkSession: this interpreter for Python workers, private temp dirs, quiet.

Every run gets its own temporary directory holding ``spark.local.dir`` (shuffle and spill),
the SQL warehouse and the JVM's ``java.io.tmpdir``, so concurrent runs on one machine never
share scratch space, and the directory is removed when the session stops. The JVM gets a
log4j2 configuration at ERROR level from its first line, so the terminal shows our progress
lines rather than Spark's start-up chatter. On a cluster these paths are the driver's
alone: executors keep their workers' own scratch directories and log configuration.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
# PySpark's launcher counts as a REPL: unless the logger that starts it has a level of its
# own, Spark forces WARN on the console and announces it on stderr.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""


def prepare_environment(master: str) -> None:
    """Point Spark's Python workers at this interpreter and bind local runs to loopback.

    For ``local`` masters the workers must run the interpreter that has cmdstalk_py installed,
    so ``PYSPARK_PYTHON`` is forced to ``sys.executable``. On a cluster the user's settings
    win (executors may need a different path to the same environment).
    """
    if master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


DEFAULT_MASTER = "local[*]"


def resolve_master(explicit: str | None, conf: Mapping[str, str] | None = None) -> str:
    """The master to use: one given explicitly, else ``spark.master`` in ``conf``, else the
    one ``spark-submit`` (or a running pyspark shell) set, else ``local[*]``.

    A JVM that spark-submit started is already there (``PYSPARK_GATEWAY_PORT``), and its
    settings are read from it; otherwise no JVM is started just to ask, because the driver's
    JVM options can only be given when it starts.
    """
    if explicit:
        return explicit
    if conf and conf.get("spark.master"):
        return conf["spark.master"]
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # connects to spark-submit's JVM, starts none
        submitted = SparkConf().get("spark.master", None)
        if submitted:
            return str(submitted)
    return DEFAULT_MASTER


def session_conf(run_dir: Path, log_level: str = "ERROR", local: bool = True) -> dict[str, str]:
    """Spark settings that keep a run's scratch files under ``run_dir`` and the log quiet.

    On a cluster (``local`` false) executors get none of these paths: they exist only on
    the driver's machine. The executors use their workers' scratch directories and log
    configuration.
    """
    local_dir = run_dir / "local"
    warehouse = run_dir / "warehouse"
    java_tmp = run_dir / "java-tmp"
    for d in (local_dir, warehouse, java_tmp):
        d.mkdir(parents=True, exist_ok=True)
    log4j = run_dir / "log4j2.properties"
    log4j.write_text(_LOG4J2.format(level=log_level.lower()))
    java_opts = f"-Djava.io.tmpdir={java_tmp} -Dlog4j2.configurationFile={log4j}"
    paths = {
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.driver.extraJavaOptions": java_opts,
    }
    if local:
        paths["spark.local.dir"] = str(local_dir)
        paths["spark.executor.extraJavaOptions"] = java_opts
    return {
        **paths,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Event times are UTC in the log; windows and date partitions must be too.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }


@contextmanager
def spark_session(
    master: str | None = None,
    app_name: str = "cmdstalk-spark",
    tmp_root: str | Path | None = None,
    log_level: str = "ERROR",
    conf: Mapping[str, str] | None = None,
) -> Iterator[SparkSession]:
    """Start a SparkSession with a private temp dir; stop it and remove the dir on exit.

    ``master`` None: see :func:`resolve_master`. ``conf`` entries override the defaults
    from :func:`session_conf`. The ``beanstalkd``
    data source is registered on the session. When this thread already has an active
    session (an application or a test suite calling the CLI in-process), that session is
    used as it is and left running.
    """
    from pyspark.sql import SparkSession

    from cmdstalk_py.spark.datasource import register

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        yield active
        return
    master = resolve_master(master, conf)
    prepare_environment(master)
    run_dir = Path(tempfile.mkdtemp(prefix="cmdstalk-spark-", dir=tmp_root))
    try:
        settings = session_conf(run_dir, log_level, local=master.startswith("local"))
        settings.update(conf or {})
        settings.pop("spark.master", None)
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        try:
            spark.sparkContext.setLogLevel(log_level)
            register(spark)
            yield spark
        finally:
            spark.stop()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
