#!/usr/bin/env python3
"""Enqueue a Spark DataFrame into beanstalkd: one job per row, two ways.

    python examples/spark_quickstart.py               # a bundled server on a free port
    python examples/spark_quickstart.py --address 127.0.0.1:11300 --rows 100000

Needs the ``spark`` extra (``pip install 'cmdstalk-py[spark]'``) and Java 17+. Without
``--address`` the bundled beanstalkd-compatible server runs in this process, so the example
needs nothing else. Then:

1. ``enqueue(df, tube, address)``: every row's ``body`` becomes a job; optional ``tube``,
   ``priority``, ``delay`` and ``ttr`` columns override the defaults per row. It returns
   the number of jobs the server acknowledged, and raises ``EnqueueFailed`` (with the count
   that was put) if a partition failed.
2. ``df.write.format("beanstalkd")``: the same data source through Spark's writer API,
   once ``register(spark)`` made it known to the session (``enqueue`` and
   ``spark_session`` register it themselves; so does importing ``cmdstalk_py.spark``
   while a session is active).
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import greenstalk


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="beanstalkd host:port (default: a bundled server)")
    parser.add_argument("--master", default="local[2]", help="Spark master URL")
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()

    with ExitStack() as stack:
        address = args.address or _bundled_server(stack)
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from cmdstalk_py.spark import enqueue, register

        # Spark's Python workers must run an interpreter that has cmdstalk_py installed.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (
            SparkSession.builder.master(args.master).appName("cmdstalk quickstart").getOrCreate()
        )
        stack.callback(spark.stop)
        register(spark)
        emails = spark.range(args.rows).select(
            F.to_json(F.struct(F.col("id").alias("user"), F.lit("welcome").alias("kind"))).alias(
                "body"
            ),
            # Every tenth user is urgent: a per-row priority column overrides the default.
            F.when(F.col("id") % 10 == 0, 0).otherwise(1024).alias("priority"),
        )
        n = enqueue(emails, tube="emails", address=address)
        print(f"enqueue(): {n} jobs in tube 'emails' at {address}")

        reports = spark.createDataFrame([("daily",), ("weekly",)], "body string")
        reports.write.format("beanstalkd").option("address", address).option(
            "tube", "reports"
        ).mode("append").save()

        host, port = address.rsplit(":", 1)
        with greenstalk.Client((host, int(port))) as client:
            for tube in ("emails", "reports"):
                ready = client.stats_tube(tube)["current-jobs-ready"]
                print(f"tube {tube!r}: {ready} ready jobs")
    return 0


def _bundled_server(stack: ExitStack) -> str:
    from cmdstalk_py.server.embedded import EmbeddedServer

    server = stack.enter_context(EmbeddedServer(host="127.0.0.1", port=0))
    host, port = server.address
    print(f"bundled beanstalkd-compatible server on {host}:{port}")
    return f"{host}:{port}"


if __name__ == "__main__":
    sys.exit(main())
