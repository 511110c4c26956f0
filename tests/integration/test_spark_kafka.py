"""Spark reads the local cluster through the Kafka connector from the cache."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

from tests.helpers import produce_acked


def test_spark_batch_reads_a_topic_through_the_kafka_connector(
    spark: SparkSession, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=3)
    sent = [f"event-{i}" for i in range(60)]
    positions = produce_acked(kafka_bootstrap, topic, sent)

    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition", "offset")
        .collect()
    )
    assert sorted(r.v for r in rows) == sorted(sent)
    assert all(r.k == r.v for r in rows)
    # Each record sits where the producer's acknowledgement said it would.
    assert {r.v: (r.partition, r.offset) for r in rows} == dict(zip(sent, positions, strict=True))


def test_session_uses_cached_jars_not_ivy(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    jars = conf.get("spark.jars").split(",")
    assert any("spark-sql-kafka-0-10" in j for j in jars)
    assert conf.get("spark.jars.packages", None) is None
    assert conf.get("spark.master").startswith("local")
