"""The SparkSession's settings, checked without starting a JVM."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from kmon.local.artifacts import _pyspark_jars, pyspark_version
from kmon.streaming.session import (
    DEFAULT_MASTER,
    archive_aliases,
    connector_jars,
    s3a_classpath,
    spark_conf,
)


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


# S3A (s3a:// checkpoints): hadoop-aws matching pyspark's own Hadoop, on the driver JVM's path.


def test_cached_s3a_matches_pyspark_hadoop_and_goes_on_the_driver_classpath(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kmon.local.artifacts import hadoop_aws_jars, hadoop_version

    monkeypatch.delenv("KMON_SPARK_JARS", raising=False)
    version = hadoop_version()
    assert (_pyspark_jars() / f"hadoop-client-api-{version}.jar").is_file()
    names = {j.name for j in hadoop_aws_jars()}
    assert f"hadoop-aws-{version}.jar" in names
    assert any(re.fullmatch(r"bundle-2\.[\d.]+\.jar", n) for n in names)  # the AWS SDK v2
    assert not names & {p.name for p in _pyspark_jars().glob("*.jar")}
    classpath = spark_conf(master="local[2]")["spark.driver.extraClassPath"].split(os.pathsep)
    assert {Path(j).name for j in classpath} == names and all(Path(j).is_file()
                                                              for j in classpath)


def test_no_s3a_classpath_when_the_deployment_ships_jars_or_pyspark_has_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    from kmon.local import artifacts

    monkeypatch.setenv("KMON_SPARK_JARS", "/opt/x.jar")
    assert s3a_classpath() == [] and "spark.driver.extraClassPath" not in spark_conf()
    monkeypatch.delenv("KMON_SPARK_JARS")
    (tmp_path / "hadoop-aws-3.5.0.jar").touch()  # the image: moved into SPARK_HOME/jars
    monkeypatch.setattr(artifacts, "_pyspark_jars", lambda: tmp_path)
    assert s3a_classpath() == []
    assert "spark.driver.extraClassPath" not in spark_conf(jars=["/a.jar"])  # explicit jars


def test_missing_s3a_jars_ask_for_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kmon.env import SettingError

    monkeypatch.delenv("KMON_SPARK_JARS", raising=False)
    with pytest.raises(SettingError, match=r"run `kmon setup`"):
        s3a_classpath(tmp_path)


def test_archive_aliases_name_where_spark_unpacks_each_archive() -> None:
    assert archive_aliases("/a/kmon-env.tar.gz#environment, hdfs:///b/x.zip") == {
        "environment", "x.zip"}
    assert archive_aliases("") == set()


def test_each_query_has_a_scheduler_pool_stage_one_weighed_above_stage_two() -> None:
    import xml.etree.ElementTree as ET

    from kmon.streaming.outputs import KEYS, TRANSACTIONS
    from kmon.streaming.session import POOLS_FILE

    conf = spark_conf(jars=[])
    assert conf["spark.scheduler.mode"] == "FAIR"
    assert conf["spark.scheduler.allocation.file"] == str(POOLS_FILE)
    pools = {p.get("name"): int(p.findtext("weight")) for p in ET.parse(POOLS_FILE).getroot()}
    # Monitor.start names the pools after the queries; an unknown name would get weight 1
    assert set(pools) == {f"kmon-{KEYS}", f"kmon-{TRANSACTIONS}"}
    assert pools[f"kmon-{KEYS}"] > pools[f"kmon-{TRANSACTIONS}"]
