"""Is the cluster whole again? Every broker running and registered, every partition led and
its ISR full, the proxies clean (enabled, no toxic), no undo left in the journal; and
``heal``, which makes it so whatever a fault (or a killed nemesis) left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from kmon.local.toxiproxy import ToxiproxyError
from kmon.nemesis.base import FaultError
from kmon.nemesis.kafka import (
    TIMEOUT,
    Journal,
    running_admin,
    set_topic_configs,
    start_broker,
)

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy


def problems(cluster: LocalCluster, proxy: LocalToxiproxy | None = None) -> list[str]:
    """What keeps the cluster from being healthy; empty when it is."""
    out = [
        f"broker {s.node_id} is {s.state}" for s in cluster.status() if s.state != "running"
    ]
    if out:
        return out  # partitions cannot be whole with a broker down; say the cause only
    missing = {s.node_id for s in cluster.status()} - cluster.live_brokers(timeout=5.0)
    out += [f"broker {n} is not registered with the controller" for n in sorted(missing)]
    try:
        with running_admin(cluster) as admin:
            metadata = admin.list_topics(timeout=TIMEOUT)
    except (KafkaException, FaultError) as exc:
        return [*out, f"no metadata: {exc}"]
    for name, topic in sorted(metadata.topics.items()):
        for p, part in sorted(topic.partitions.items()):
            if part.leader < 0:
                out.append(f"{name}/{p} has no leader")
            elif sorted(part.isrs) != sorted(part.replicas):
                out.append(f"{name}/{p} ISR {sorted(part.isrs)} of replicas {part.replicas}")
    if proxy is not None:
        try:
            out += proxy.problems()
        except ToxiproxyError as exc:
            out.append(str(exc))
    out += [
        f"undo pending from a fault: {entry}" for entry in Journal(cluster.home).pending().values()
    ]
    return out + _kafka_proxy_problems(cluster)


def _kafka_proxy_problems(cluster: LocalCluster) -> list[str]:
    from kmon.local.kafka_proxy import KafkaProxyError
    from kmon.nemesis.protocol import kafka_proxy_of

    try:
        return kafka_proxy_of(cluster).problems()
    except KafkaProxyError as exc:
        return [str(exc)]


def wait_healthy(
    cluster: LocalCluster, proxy: LocalToxiproxy | None = None, timeout: float = 180.0,
    on_wait: Callable[[list[str]], None] | None = None,
) -> float:
    """Wait until ``problems`` is empty; returns the seconds it took (FaultError naming what is
    still wrong after ``timeout``).
    """
    started = time.monotonic()
    while True:
        found = problems(cluster, proxy)
        if not found:
            return time.monotonic() - started
        if time.monotonic() - started >= timeout:
            shown = "; ".join(found[:8]) + (f" (+{len(found) - 8} more)" if len(found) > 8 else "")
            raise FaultError(f"cluster not healthy after {timeout:.0f}s: {shown}")
        if on_wait is not None:
            on_wait(found)
        time.sleep(1.0)


def heal(cluster: LocalCluster, proxy: LocalToxiproxy | None = None) -> list[str]:
    """Undo whatever faults left: resume paused brokers, apply journaled undos, reset the
    proxies, start stopped brokers. Returns what it did; every step is tried even if an
    earlier one failed (FaultError listing the failures at the end).
    """
    from kmon.nemesis.protocol import kafka_proxy_of

    done: list[str] = []
    failed: list[str] = []
    for status in cluster.status():
        if status.state == "paused":
            cluster.resume(status.node_id)
            done.append(f"resumed broker {status.node_id}")
    journal = Journal(cluster.home)
    for entry_id, entry in journal.pending().items():
        if entry.get("kind") == "topic-configs":
            try:
                with running_admin(cluster) as admin:
                    set_topic_configs(admin, entry["topic"], entry["configs"])
            except FaultError as exc:
                if "UNKNOWN_TOPIC" not in str(exc):  # a topic deleted meanwhile needs nothing
                    failed.append(str(exc))
                    continue
            done.append(f"restored {entry['topic']} settings {entry['configs']}")
        journal.remove(entry_id)
    if proxy is not None and proxy.is_up():
        dirty = proxy.problems()
        if dirty:
            proxy.reset()
            done.append(f"reset the proxies ({'; '.join(dirty)})")
    kafka_proxy = kafka_proxy_of(cluster)
    held = kafka_proxy.held()
    if held:
        kafka_proxy.reset()
        done.append(f"reset the Kafka proxy ({', '.join(held)})")
    for status in cluster.status():
        if status.state == "stopped":
            try:
                start_broker(cluster, status.node_id)
                done.append(f"started broker {status.node_id}")
            except Exception as exc:
                failed.append(f"starting broker {status.node_id}: {exc}")
    if failed:
        raise FaultError("heal: " + "; ".join(failed))
    return done
