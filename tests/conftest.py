"""Fixtures shared by the whole suite: one Kafka cluster and one SparkSession per pytest run.

The cluster is the suite's own local cluster, kept apart from the one `kmon run` starts:
state under ``$KMON_HOME/test`` (default ``<repo>/var/test``), ports from
``KMON_PORT_BASE + 50``. It is started on first use if it is not running and stopped at the
end of the run (set ``KMON_KEEP_CLUSTER=1`` to keep it up between runs: ``up`` is idempotent).

To run against an existing cluster instead, set ``KMON_BOOTSTRAP`` to its bootstrap servers;
tests that need to signal broker processes are then skipped.

Everything under ``tests/integration`` is marked ``integration``; ``-m "not integration"``
runs only the tests that need neither Kafka nor Spark.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from tests import skip_policy
from tests.helpers import suite_stack

if TYPE_CHECKING:  # Kafka and Spark are imported only by the tests that use them
    from pyspark.sql import SparkSession

    from kmon.local.cluster import LocalCluster

INTEGRATION_DIR = Path(__file__).parent / "integration"

# Property tests judge behaviour, never speed: Hypothesis's per-example deadline and its
# too-slow health check would fail them on a loaded machine (CI shares two cores with three
# brokers and Spark; a test_events run once failed its 200 ms deadline so).
settings.register_profile("kmon", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kmon")


# Modules whose in-process monitors leave librdkafka clients behind run after every test that
# kills brokers: twice in CI a client in the pytest process aborted it (SIGABRT) while the
# unclean-election test killed a broker, right after these modules had run.
RUN_LAST = ("test_detection.py", "test_monitor.py", "test_monitor_restart.py",
            "test_monitor_watermark.py")


def pytest_configure(config: pytest.Config) -> None:
    skip_policy.pytest_configure(config)  # a module whose every test skipped fails the run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    items.sort(key=lambda item: Path(str(item.fspath)).name in RUN_LAST)  # stable otherwise


@pytest.fixture(scope="session")
def external_bootstrap() -> str | None:
    return os.environ.get("KMON_BOOTSTRAP") or None


@pytest.fixture(scope="session")
def local_cluster(external_bootstrap: str | None) -> Iterator[LocalCluster]:
    """The suite's local cluster, up; skips the test when running against KMON_BOOTSTRAP."""
    if external_bootstrap:
        pytest.skip("KMON_BOOTSTRAP points at an external cluster: no process control")
    from kmon.local.cluster import LocalCluster

    home, base = suite_stack()
    cluster = LocalCluster(home=home, port_base=base)
    cluster.up()
    cluster.drop_topics("")  # earlier sessions' (the suite's stack is its own)
    yield cluster
    if os.environ.get("KMON_KEEP_CLUSTER") != "1":
        cluster.down()


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest, external_bootstrap: str | None) -> str:
    """Bootstrap servers of the cluster under test (local, or KMON_BOOTSTRAP)."""
    if external_bootstrap:
        return external_bootstrap
    return str(request.getfixturevalue("local_cluster").bootstrap)


@pytest.fixture
def healthy_cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The local cluster for a fault test: whatever the test broke is mended afterwards."""
    yield local_cluster
    for status in local_cluster.status():
        if status.state == "paused":
            local_cluster.resume(status.node_id)
        elif status.state == "stopped":
            local_cluster.start(status.node_id, wait=False)
    local_cluster.wait_ready()


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Create a fresh RF=3 topic (unique name) and return its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def create(partitions: int = 1, replication_factor: int = 3, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor)
        admin.create_topics([topic])[name].result(30)
        return name

    return create


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One SparkSession (local mode, Kafka connector from the cache) for the whole run."""
    from kmon.streaming.session import build_spark_session

    session = build_spark_session(
        app_name="kmon-tests",
        checkpoint_location=str(tmp_path_factory.mktemp("checkpoints")),
    )
    yield session
    session.stop()
