"""One SparkSession (local[2]) for every Spark test: starting a JVM is slow.

Without the ``spark`` extra the tests that need the session skip (the fixture asks for
pyspark); the modules that import pyarrow at their top skip themselves.

A Spark test may pay for a JVM start (the session's, in whichever test asks first, or a
command's own) on a machine whose cores are busy with other work: each gets
``SPARK_TEST_TIMEOUT`` unless it sets a timeout of its own. Its waits have deadlines of
their own, well inside that.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.spark.cluster import Cluster, java_missing, standalone_cluster

SPARK_TEST_TIMEOUT = 600
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The timeout of every Spark test here (``spark`` mark or session) without its own."""
    for item in items:
        if _HERE not in item.path.parents or item.get_closest_marker("timeout"):
            continue
        uses_spark = {"spark", "spark_cluster"} & set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("spark") or uses_spark:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT))


if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A local[2] session with private temp dirs, the beanstalkd data source registered."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from cmdstalk_py.spark.session import spark_session

    with spark_session(
        "local[2]", "cmdstalk-tests", tmp_root=tmp_path_factory.mktemp("spark")
    ) as s:
        yield s


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and two 1-core workers on 127.0.0.1, for the whole session."""
    if java_missing():
        pytest.skip("Java not found: the Spark cluster tests need a JDK (17+)")
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster
