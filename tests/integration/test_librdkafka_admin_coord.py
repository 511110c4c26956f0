"""librdkafka 2.16.0 aborts the process when an admin request to a group coordinator times out
while the coordinator is paused and answers later. Found by a DeleteRecords fault under broker
faults (the nemesis asked ListConsumerGroupOffsets of every group, every second); the abort
is on librdkafka's main thread, whose signals are blocked. Stack from the core:

    rd_kafka_thread_main -> rd_kafka_q_serve -> rd_kafka_op_handle_std -> rd_kafka_buf_callback
      -> rd_kafka_admin_coord_response_parse -> rd_kafka_enq_once_del_source_return
      -> __assert_fail("eonce->refcnt > 0") -> abort

The workaround is in ``kmon.nemesis.records._committed``: a consumer's ``committed()`` asks
the coordinator through the consumer group machinery, not the admin coordinator requests. The
reproducer runs in a child process; it aborted in each of two runs on 2026-11-26 (strict
xfail: a librdkafka that fixes it makes this test fail, and the workaround can go).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

SCRIPT = '''
import faulthandler, sys, time
faulthandler.enable(all_threads=True)
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
bootstrap, group, topic, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
deadline = time.monotonic() + seconds
n = 0
with AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}) as admin:
    while time.monotonic() < deadline:
        ask = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
        try:
            admin.list_consumer_group_offsets(ask, request_timeout=1)[group].result(5)
        except Exception:
            pass
        n += 1
print("survived", n, flush=True)
'''


def _group_with_offsets(cluster: Any, topic: str, group: str) -> int:
    """A group with a committed offset on ``topic``; returns its coordinator's node id."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(cluster.client_config(**{"group.id": group}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    with cluster.admin() as admin:
        return int(admin.describe_consumer_groups([group])[group].result(30).coordinator.id)


@pytest.mark.xfail(strict=True, reason="librdkafka 2.16.0: rd_kafka_admin_coord_response_parse "
                   "aborts (eonce->refcnt > 0) on a paused coordinator's late answer")
def test_admin_coordinator_requests_survive_a_paused_coordinator(local_cluster: Any) -> None:
    from kmon.local.ports import BROKER_IDS

    topic, group = f"kmon-coord-{uuid.uuid4().hex[:6]}", f"kmon-coord-{uuid.uuid4().hex[:6]}"
    local_cluster.create_topic(topic, partitions=1, replication_factor=3)
    coordinator = _group_with_offsets(local_cluster, topic, group)
    other = next(n for n in BROKER_IDS if n != coordinator)
    child = subprocess.Popen([sys.executable, "-c", SCRIPT, local_cluster.broker_address(other),
                              group, topic, "25"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        local_cluster.pause(coordinator)
        time.sleep(8)  # requests time out (1 s) while their answers wait in the paused broker
    finally:
        local_cluster.resume(coordinator)
    out, err = child.communicate(timeout=120)
    assert child.returncode != -signal.SIGABRT, err[-3000:]
    assert child.returncode == 0 and "survived" in out, err[-3000:]
