"""Histories as op events: replaying an ``Op`` history into an events topic.

For tests, benchmarks and investigations: a history (``kmon.history.load`` or a test's ops)
becomes the events a probe would have emitted. ``as_events`` fills in what probes add and
Jepsen histories lack: the probe id and, on each completion, its invocation's time; and it can
move the history's clock (histories often start at 0) to the present, so that the monitor's
future-skew check and watermark see realistic times.

Events of one process go to one partition (the record key is the process), in op order: the
monitor folds a process's fragments in the order it reads them, as probes guarantee.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from kmon.history import avro
from kmon.history.model import MOP_FS, KeyPlacement, Op, OpMeta, is_clock_tick
from kmon.history.model import clock_tick as clock_tick  # re-exported for replays' callers


def as_events(ops: Iterable[Op], probe: str = "probe-1", time_offset_ns: int = 0,
              time_scale: float = 1.0) -> Iterator[Op]:
    """``ops`` with probe metadata and completions' invoke times; times scaled then shifted."""
    invoked: dict[Any, int] = {}
    for op in ops:
        t = int(op.time * time_scale) + time_offset_ns
        meta = op.meta if op.meta is not None else OpMeta()
        invoke_time = None
        if op.type == "invoke":
            invoked[op.process] = t
        else:
            invoke_time = invoked.pop(op.process, t)
            if meta.invoke_time is not None:
                invoke_time = int(meta.invoke_time * time_scale) + time_offset_ns
        meta = dataclasses.replace(meta, probe=probe, invoke_time=invoke_time)
        yield dataclasses.replace(op, time=t, meta=meta)


def produce(producer: Any, topic: str, events: Iterable[Op], flush: bool = True) -> int:
    """Encode and send ``events`` (each with the schema header); returns how many.

    A clock tick goes to every partition of ``topic``, as probes send them: the monitor's
    watermark is the lowest of its partitions'."""
    headers = avro.kafka_headers()
    n = 0
    partitions: list[int] | None = None
    for op in events:
        value = avro.encode_op(op)
        if is_clock_tick(op):
            if partitions is None:
                partitions = sorted(producer.list_topics(topic, timeout=30)
                                    .topics[topic].partitions)
            for p in partitions:
                _send(producer, topic, value, headers, partition=p)
        else:
            _send(producer, topic, value, headers, key=str(op.process).encode())
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
    if flush:
        producer.flush(60)
    return n


def _send(producer: Any, topic: str, value: bytes, headers: Any, **where: Any) -> None:
    while True:
        try:
            producer.produce(topic, value=value, headers=headers, **where)
            return
        except BufferError:
            producer.poll(0.05)


def with_placements(ops: Iterable[Op], topic: str, leader: int | None = None) -> Iterator[Op]:
    """``ops`` with every key they touch placed on ``topic``, partition = the key (0 for a
    string key), led by broker ``leader``, as a probe reports where its keys live."""
    for op in ops:
        keys: set[Any] = set()
        if op.f in MOP_FS or op.f == "commit":
            for m in op.value or ():
                if m[0] == "send" or m[0] == "commit":
                    keys.add(m[1])
                elif m[1]:
                    keys.update(m[1])
        if not keys:
            yield op
            continue
        placements = {k: KeyPlacement(topic, k if isinstance(k, int) else 0, leader)
                      for k in keys}
        meta = op.meta if op.meta is not None else OpMeta()
        yield dataclasses.replace(op, meta=dataclasses.replace(meta, placements=placements))
