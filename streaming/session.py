"""The project's SparkSession: local mode by default, with the Kafka connector from the cache.

The connector (spark-sql-kafka-0-10 matching the installed pyspark, and the few jars it needs
beyond pyspark's own) is fetched once by ``kmon setup`` and put on the classpath through
``spark.jars`` as file paths, so building a session never resolves anything over the network.

S3A (``s3a://`` checkpoints: hadoop-aws matching pyspark's Hadoop and its AWS SDK bundle, also
fetched by ``kmon setup``) goes on the driver JVM's own classpath (``spark.driver.extraClassPath``,
which in local mode is the executors' too): Hadoop's FileSystem loader looks for ``s3a`` there,
not in ``spark.jars``' class loader. An image with hadoop-aws in pyspark's ``jars/`` needs none.

Environment: ``KMON_SPARK_MASTER`` (default ``local[2]``), ``KMON_SPARK_JARS`` (comma-separated
jar paths, for a deployment that ships the connector, and S3A if it needs it, itself instead of
kmon's cache).

Under ``spark-submit`` (``launched_by_spark_submit``) the master and the jars are spark-submit's
(``--master``, ``--packages``/``--jars``): the session then takes only kmon's other settings.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"  # this machine has 2 cores; the monitor is one job among several
POOLS_FILE = Path(__file__).with_name("pools.xml")  # the FAIR scheduler's pools


def connector_jars(cache: str | os.PathLike[str] | None = None) -> list[str]:
    """Paths of the Kafka connector jars: ``KMON_SPARK_JARS`` if set, else kmon's cache."""
    if explicit := os.environ.get("KMON_SPARK_JARS"):
        return [p for p in explicit.split(",") if p]
    # Imported here: the cache layout belongs to set-up, and a deployed monitor never needs it.
    from kmon.local.artifacts import spark_kafka_jars

    return [str(p) for p in spark_kafka_jars(Path(cache) if cache else None)]


def s3a_classpath(cache: str | os.PathLike[str] | None = None) -> list[str]:
    """Jars that give the driver JVM ``s3a://``: none when ``KMON_SPARK_JARS`` is set (the
    deployment ships its classpath) or pyspark already has hadoop-aws (the image), else the
    cache's (a SettingError asking for `kmon setup` when missing)."""
    if os.environ.get("KMON_SPARK_JARS"):
        return []
    from kmon.local.artifacts import _pyspark_jars, hadoop_aws_jars

    if any(_pyspark_jars().glob("hadoop-aws-*.jar")):
        return []
    return [str(p) for p in hadoop_aws_jars(Path(cache) if cache else None)]


def launched_by_spark_submit() -> bool:
    """True when spark-submit (or another JVM launcher) started this Python driver."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_conf(
    master: str | None = None,
    checkpoint_location: str | None = None,
    jars: Sequence[str] | None = None,
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The settings ``build_spark_session`` applies (pure, so it can be checked without a JVM)."""
    master = master or os.environ.get("KMON_SPARK_MASTER") or DEFAULT_MASTER
    settings = {
        "spark.master": master,
        "spark.jars": ",".join(jars if jars is not None else connector_jars()),
        # Shuffles of the monitor are keyed by topic-partition: a handful of keys, not the
        # 200 partitions Spark assumes for big batch jobs.
        "spark.sql.shuffle.partitions": "2",
        # Timestamps in op events and reports are UTC; never the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        # Several engineers' sessions share one machine: no UI port to fight over (4040...).
        "spark.ui.enabled": "false",
        # The progress bar garbles the logs of `kmon run` and pytest; metrics report progress.
        "spark.ui.showConsoleProgress": "false",
        # Stage 2's batches (every txn.trigger) must not hold the cores stage 1's batches
        # wait for: each query runs in a pool of its own (Monitor.start), stage 1's weighed
        # 8 to 1 (pools.xml).
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(POOLS_FILE),
    }
    if jars is None and (s3a := s3a_classpath()):
        settings["spark.driver.extraClassPath"] = os.pathsep.join(s3a)
    if master.startswith("local"):
        # Loopback only, like the rest of the local stack; avoids resolving the host name.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
        if not os.environ.get("PYSPARK_PYTHON"):
            # Python workers run kmon's folds: the driver's interpreter has kmon, while the
            # default (python3 on PATH) need not, e.g. under `make test` with no venv active.
            settings["spark.pyspark.python"] = sys.executable
    if checkpoint_location:
        settings["spark.sql.streaming.checkpointLocation"] = checkpoint_location
    settings.update(conf or {})
    return settings


def build_spark_session(
    app_name: str = "kmon",
    master: str | None = None,
    checkpoint_location: str | None = None,
    conf: Mapping[str, str] | None = None,
    jars: Sequence[str] | None = None,
) -> SparkSession:
    """Get or create the SparkSession for kmon.

    ``master`` defaults to ``KMON_SPARK_MASTER`` or ``local[2]``; ``checkpoint_location``
    becomes the default for streaming queries; ``conf`` adds or overrides any Spark setting;
    ``jars`` replaces the cached connector jars. Settings that shape the JVM (``spark.jars``,
    driver memory) only take effect when this creates the first session of the process.
    """
    from pyspark.sql import SparkSession

    if launched_by_spark_submit():
        # spark-submit chose the master and shipped the jars: keep its choices.
        settings = spark_conf("submitted", checkpoint_location, [], conf)
        for key in ("spark.master", "spark.jars", "spark.driver.extraClassPath"):
            settings.pop(key, None)
        builder = SparkSession.builder.appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        return _with_archive_python(builder.getOrCreate())
    settings = spark_conf(master, checkpoint_location, jars, conf)
    if settings["spark.master"].startswith("local"):
        # Spark otherwise resolves the host name and warns that it binds to a loopback address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if python := settings.get("spark.pyspark.python"):
        # pyspark takes the Python workers' interpreter from this variable, not from the conf
        # (spark-submit would copy it over); on a cluster e.g. ./environment/bin/python, inside
        # the archive `kmon pack` makes (spark.archives).
        os.environ["PYSPARK_PYTHON"] = python
    elif settings["spark.master"].startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return _with_archive_python(builder.getOrCreate())


def archive_aliases(archives: str) -> set[str]:
    """The directory names ``spark.archives`` unpacks into (``path#alias``, else the file
    name)."""
    out = set()
    for item in filter(None, (a.strip() for a in archives.split(","))):
        path, _, alias = item.partition("#")
        out.add(alias or path.rstrip("/").rsplit("/", 1)[-1])
    return out


def _with_archive_python(spark: SparkSession) -> SparkSession:
    """Make a Python workers' interpreter inside an archive (``./environment/bin/python``,
    with ``spark.archives=kmon-env.tar.gz#environment``) runnable on the driver as well.

    Executors start Python workers in their working directory, where Spark unpacked the
    archive. The driver starts one too, to check a ``transformWithState`` processor's state
    schema while planning, but in its own working directory, not where Spark unpacked the
    archive for it (``SparkFiles.getRootDirectory()``): ``./environment`` is made a link there.
    A directory of that name that is not such a link is left alone."""
    python = Path(os.environ.get("PYSPARK_PYTHON", ""))
    if python.is_absolute() or len(python.parts) < 2:
        return spark
    alias = python.parts[0]
    if alias not in archive_aliases(spark.conf.get("spark.archives", "") or ""):
        return spark
    from pyspark import SparkFiles

    unpacked = Path(SparkFiles.getRootDirectory()) / alias
    link = Path.cwd() / alias
    if link.is_symlink():
        link.unlink()
    if not link.exists():
        link.symlink_to(unpacked, target_is_directory=True)
    return spark


# Loggers whose warnings are expected in normal operation and drown the ones that matter.
# The transformWithState state server warns on every read of a state value that does not exist
# yet: once per new key, which for the transaction stage is once per transaction. The trigger's
# executor warns on every micro-batch longer than the trigger, which on a small machine is every
# one; what matters, a backlog that grows, shows in kmon_monitor_watermark_delay_seconds
# (KmonMonitorFallingBehind) and kmon_monitor_batch_duration_seconds.
QUIET_LOGGERS = {
    "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer":
        "ERROR",
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor": "ERROR",
}


def quiet_expected_warnings(spark: SparkSession) -> None:
    """Raise the level of ``QUIET_LOGGERS`` in this JVM (the driver; in local mode the
    executors too). A cluster's executors take theirs from their own log4j2 configuration."""
    jvm = spark.sparkContext._jvm
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    for name, level in QUIET_LOGGERS.items():
        configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.getLevel(level))
