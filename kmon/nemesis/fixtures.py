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
from typing import TYPE_CHECKING, Protocol, TypeVar

import pytest

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.kafka_proxy import LocalKafkaProxy
    from kmon.local.toxiproxy import LocalToxiproxy
    from kmon.nemesis.runner import Nemesis


class _Proxy(Protocol):
    def up(self) -> object: ...
    def is_up(self) -> bool: ...
    def reset(self) -> object: ...
    def down(self) -> object: ...


P = TypeVar("P", bound=_Proxy)


@pytest.fixture(scope="session")
def toxiproxy(local_cluster: LocalCluster) -> Iterator[LocalToxiproxy]:
    from kmon.local.toxiproxy import LocalToxiproxy, find_binary

    proxy = LocalToxiproxy(home=local_cluster.home, port_base=local_cluster.ports.base,
                           cache=local_cluster.cache)
    yield from _session_proxy(proxy, find_binary(proxy.cache) is not None,
                              "toxiproxy-server not installed")


@pytest.fixture(scope="session")
def kafka_proxy(local_cluster: LocalCluster) -> Iterator[LocalKafkaProxy]:
    from kmon.local.kafka_proxy import find_dist
    from kmon.nemesis.protocol import kafka_proxy_of

    proxy = kafka_proxy_of(local_cluster)
    yield from _session_proxy(proxy, find_dist(proxy.cache) is not None,
                              "the Kafka protocol proxy is not built")


def _session_proxy(proxy: P, installed: bool, missing: str) -> Iterator[P]:
    """Start ``proxy`` for the session; reset (and stop, unless ``KMON_KEEP_CLUSTER=1``) at
    the end. Not installed is an error, not a skip: the set-up installs both proxies, and a
    skip here turned every fault test and the whole detection matrix green on a machine
    without them."""
    if not installed:
        pytest.fail(f"{missing}: run `make setup` (kmon nemesis install-tools)", pytrace=False)
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
