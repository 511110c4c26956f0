"""The SparkSession's settings, checked without starting a JVM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kmon.local.artifacts import _pyspark_jars, pyspark_version
from kmon.streaming.session import DEFAULT_MASTER, connector_jars, spark_conf


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KMON_SPARK_MASTER", raising=False)
    conf = spark_conf(jars=["/a.jar", "/b.jar"])
    assert conf["spark.master"] == DEFAULT_MASTER == "local[2]"
    assert conf["spark.jars"] == "/a.jar,/b.jar"
    assert "spark.jars.packages" not in conf  # never Ivy at run time
    assert "spark.sql.streaming.checkpointLocation" not in conf


def test_master_checkpoint_and_extra_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMON_SPARK_MASTER", "spark://10.0.0.1:7077")
    conf = spark_conf(
        checkpoint_location="/ckpt", jars=[], conf={"spark.sql.shuffle.partitions": "8"}
    )
    assert conf["spark.master"] == "spark://10.0.0.1:7077"
    assert "spark.driver.host" not in conf  # loopback binding is for local mode only
    assert conf["spark.sql.streaming.checkpointLocation"] == "/ckpt"
    assert conf["spark.sql.shuffle.partitions"] == "8"  # the caller's conf wins
    assert spark_conf(master="local[1]", jars=[])["spark.master"] == "local[1]"
    assert "spark.pyspark.python" not in conf  # a cluster's executors have their own Python


def test_local_workers_use_the_drivers_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert spark_conf(master="local[2]", jars=[])["spark.pyspark.python"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py")  # the user's choice wins
    assert "spark.pyspark.python" not in spark_conf(master="local[2]", jars=[])


def test_cached_connector_matches_pyspark_and_adds_only_what_it_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KMON_SPARK_JARS", raising=False)
    jars = [Path(j) for j in connector_jars()]
    names = {j.name for j in jars}
    assert f"spark-sql-kafka-0-10_2.13-{pyspark_version()}.jar" in names
    assert any(n.startswith("kafka-clients-") for n in names)
    assert all(j.is_file() for j in jars)
    shipped = {p.name for p in _pyspark_jars().glob("*.jar")}
    assert not names & shipped


def test_explicit_jars_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMON_SPARK_JARS", "/opt/x.jar,/opt/y.jar")
    assert connector_jars() == ["/opt/x.jar", "/opt/y.jar"]
