"""``LocalCluster.drop_topics`` returns once no running broker lists what it deleted.

A broker learns of a deletion from the metadata log a moment after the controller has
answered DeleteTopics; a fresh clone's run read the deleted topics from a broker that had not
yet. Brokers here are stubs whose Metadata answers lag the deletion by a set number of answers.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kmon.local.cluster import ClusterError, LocalCluster
from kmon.local.ports import BROKER_IDS


class LaggingBrokers:
    """Topics, and per broker how many more Metadata answers still list the deleted ones."""

    def __init__(self, topics: set[str], lag: dict[int, int]) -> None:
        self.topics = set(topics)
        self.deleted: set[str] = set()
        self.lag = dict(lag)

    def admin(self, node_id: int) -> Any:
        brokers = self

        class Admin:
            def __enter__(self) -> Admin:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
                listed = set(brokers.topics)
                if brokers.deleted and brokers.lag.get(node_id, 0) > 0:
                    brokers.lag[node_id] -= 1
                    listed |= brokers.deleted
                return SimpleNamespace(topics=dict.fromkeys(listed))

            def delete_topics(self, names: list[str], request_timeout: float = 0) -> Any:
                brokers.topics -= set(names)
                brokers.deleted |= set(names)
                done: Future[None] = Future()
                done.set_result(None)
                return dict.fromkeys(names, done)

        return Admin()


def _cluster(tmp_path: Path, brokers: LaggingBrokers, monkeypatch: pytest.MonkeyPatch,
             ) -> LocalCluster:
    cluster = LocalCluster(home=tmp_path, port_base=40000)
    monkeypatch.setattr(cluster, "state", lambda node_id: "running")
    monkeypatch.setattr(cluster, "node_admin", brokers.admin)
    return cluster


def test_drop_topics_returns_only_once_every_broker_has_forgotten_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = LaggingBrokers({"kmon-x.0", "kmon-x.1", "other"}, lag={2: 3, 3: 1})
    cluster = _cluster(tmp_path, brokers, monkeypatch)
    assert cluster.drop_topics("kmon-x.") == ["kmon-x.0", "kmon-x.1"]
    assert brokers.lag == {2: 0, 3: 0}  # every lagging answer was waited out
    for n in BROKER_IDS:
        assert set(brokers.admin(n).list_topics().topics) == {"other"}


def test_a_broker_that_never_forgets_a_deleted_topic_is_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = LaggingBrokers({"kmon-x.0", "other"}, lag={3: 10**9})
    cluster = _cluster(tmp_path, brokers, monkeypatch)
    with pytest.raises(ClusterError, match=r"forget the deleted topics kmon-x\.0"):
        cluster.drop_topics("kmon-x.", timeout=0.3)
