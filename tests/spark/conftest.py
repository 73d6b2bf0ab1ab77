"""One SparkSession (local[2]) for every Spark test: starting a JVM is slow.

Without the ``spark`` extra the tests that need the session skip (the fixture asks for
pyspark); the modules that import pyarrow at their top skip themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.spark.cluster import Cluster, java_missing, standalone_cluster

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
