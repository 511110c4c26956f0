"""pytest fixtures for fault tests on the suite's local cluster (``local_cluster`` from
tests/conftest.py). Import them into a test module::

    from kmon.nemesis.fixtures import nemesis, toxiproxy  # noqa: F401  (pytest fixtures)

- ``toxiproxy`` (session): the cluster's Toxiproxy, started on first use (fails the test when
  ``toxiproxy-server`` is not installed: ``make setup``), reset and stopped at the end unless
  ``KMON_KEEP_CLUSTER=1``.
- ``kafka_proxy`` (session): the cluster's Kafka protocol proxy (Kroxylicious with kmon's
  fault filters), started on first use (fails the test when it is not built: ``make setup``),
  reset and stopped at the end unless ``KMON_KEEP_CLUSTER=1``.
- ``nemesis`` (per test): a ``Nemesis`` on the cluster and its proxies, healed and healthy
  before the test (an earlier run may have died mid-fault). At teardown it stops
  any fault the test left running, heals what is left (paused or stopped brokers, toxics,
  journaled topic settings) and fails the test unless the cluster is healthy again: every
  broker up, every ISR full, the proxies clean.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.kafka_proxy import LocalKafkaProxy
    from kmon.local.toxiproxy import LocalToxiproxy
    from kmon.nemesis.runner import Nemesis


@pytest.fixture(scope="session")
def toxiproxy(local_cluster: LocalCluster) -> Iterator[LocalToxiproxy]:
    from kmon.local.toxiproxy import LocalToxiproxy, find_binary

    proxy = LocalToxiproxy(home=local_cluster.home, port_base=local_cluster.ports.base,
                           cache=local_cluster.cache)
    if find_binary(proxy.cache) is None:
        # An error, not a skip: the set-up installs it, and a skip here turned every fault
        # test and the whole detection matrix green on a machine without it.
        pytest.fail("toxiproxy-server not installed: run `make setup` (kmon nemesis "
                    "install-tools)", pytrace=False)
    proxy.up()
    yield proxy
    if proxy.is_up():
        proxy.reset()
        if os.environ.get("KMON_KEEP_CLUSTER") != "1":
            proxy.down()


@pytest.fixture(scope="session")
def kafka_proxy(local_cluster: LocalCluster) -> Iterator[LocalKafkaProxy]:
    from kmon.local.kafka_proxy import find_dist
    from kmon.nemesis.protocol import kafka_proxy_of

    proxy = kafka_proxy_of(local_cluster)
    if find_dist(proxy.cache) is None:
        # An error, not a skip, as for toxiproxy-server: the set-up builds it.
        pytest.fail("the Kafka protocol proxy is not built: run `make setup` (kmon nemesis "
                    "install-tools)", pytrace=False)
    proxy.up()
    yield proxy
    if proxy.is_up():
        proxy.reset()
        if os.environ.get("KMON_KEEP_CLUSTER") != "1":
            proxy.down()


@pytest.fixture
def nemesis(local_cluster: LocalCluster, toxiproxy: LocalToxiproxy) -> Iterator[Nemesis]:
    from kmon.nemesis import health
    from kmon.nemesis.runner import Nemesis

    runner = Nemesis(local_cluster, toxiproxy)
    # Start whole, even after an earlier run that died mid-fault (its undo journal persists).
    runner.heal()
    health.wait_healthy(local_cluster, toxiproxy, timeout=180.0)
    yield runner
    runner.heal()
    health.wait_healthy(local_cluster, toxiproxy, timeout=180.0)
