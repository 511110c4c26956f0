# syntax=docker/dockerfile:1
# The image the Helm chart runs: `kmon probe`, the `kmon monitor` Spark driver, and the Spark
# executors it starts on Kubernetes. Python 3.11 (kmon's) on Debian bookworm, whose Java 17 is
# Spark 4's JVM; Spark is pyspark's own distribution, with the Kafka connector on its classpath,
# and S3A for s3a:// checkpoints: hadoop-aws matching pyspark's Hadoop and the AWS SDK bundle it
# pins (about 700 MB), moved into SPARK_HOME/jars, where driver and executor JVMs load them and
# where `kmon monitor` finds S3A without kmon's cache. /opt/kmon/kmon-env.tar.gz is `kmon pack`'s
# archive of the same kmon, for executors outside Kubernetes that lack it (monitor.spark.master
# spark://..., docs/monitor.md#on-a-spark-cluster); it needs Python at /usr/local/bin there.
#
#   docker build -t ghcr.io/kmon-dev/kmon:0.1.0 .
#
# Linted by hadolint in the test suite (tests/unit/ops/test_ops_chart.py); not built there.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# A JDK and Maven: `kmon setup` compiles a helper and resolves Spark's Kafka connector from
# Maven Central. A C compiler: the install compiles the checker core with mypyc (setup.py).
# Unpinned package versions: bookworm's security updates are what we want.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY kmon ./kmon
COPY streaming ./streaming
COPY probes ./probes
COPY dashboards ./dashboards
ENV KMON_CACHE=/opt/kmon/cache
RUN python -m venv /opt/kmon/venv \
    && /opt/kmon/venv/bin/pip install --no-cache-dir . \
    && /opt/kmon/venv/bin/kmon setup --no-prometheus \
    && cp /opt/kmon/cache/spark-kafka-*/jars/*.jar \
        /opt/kmon/venv/lib/python3.11/site-packages/pyspark/jars/ \
    && mv /opt/kmon/cache/hadoop-aws-*/jars/*.jar \
        /opt/kmon/venv/lib/python3.11/site-packages/pyspark/jars/ \
    && /opt/kmon/venv/bin/kmon pack --source /src -o /opt/kmon/kmon-env.tar.gz \
    && rm -rf /opt/kmon/cache/kafka-* /opt/kmon/cache/hadoop-aws-* /opt/kmon/cache/m2 \
        /opt/kmon/cache/pack

FROM ${PYTHON_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /usr/lib/jvm/kmon-java \
    && groupadd --gid 10001 kmon \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin kmon
COPY --from=build /opt/kmon /opt/kmon
COPY docker/entrypoint.sh docker/kmon_main.py /opt/kmon/
ENV PATH=/opt/kmon/venv/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/kmon-java \
    SPARK_HOME=/opt/kmon/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/kmon/venv/bin/python \
    KMON_CACHE=/opt/kmon/cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The chart's security context: a fixed non-root user, read-only root filesystem (/tmp is an
# emptyDir), no capabilities.
USER 10001:10001
WORKDIR /tmp
EXPOSE 9464 9465 7078 7079
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/kmon/entrypoint.sh"]
CMD ["--help"]
