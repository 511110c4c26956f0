"""Avro op event codec throughput on one core, for a typical nested probe event.

Prints events/s for ``encode_op`` / ``decode_op`` (model <-> bytes) and for fastavro alone
(record dict <-> bytes), so the model conversion's share is visible. Numbers are printed, never
asserted: they depend on the machine.

    python bench/bench_codec.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import io
import os
import time
from collections.abc import Callable

import fastavro

from kmon.history import KeyPlacement, Op, OpMeta, Rebalance
from kmon.history.avro import decode_op, encode_op, load_schema, op_to_record
from kmon.history.model import poll, send


def typical_op() -> Op:
    """A completed transaction as a probe emits it: 4 sends, 2 polls of 3 keys x 5 records,
    a rebalance, placements for the 4 keys it touched."""
    keys = [3, 7, 11, 19]
    reads = {k: [(1000 + i, 50_000 + 10 * k + i) for i in range(5)] for k in keys[:3]}
    return Op(
        index=1_234_567,
        time=1_700_000_000_123_456_789,
        process=42,
        type="ok",
        f="txn",
        value=[
            *(send(k, 90_000 + k, 2_000 + k) for k in keys),
            poll(reads),
            poll({keys[3]: [(2_019, 90_019)]}),
        ],
        rebalance_log=(Rebalance("assigned", (3, 7)),),
        meta=OpMeta(
            probe="probe-eu-1",
            transactional_id="kmon-probe-eu-1-42",
            txn_seq=918,
            placements={k: KeyPlacement("kmon-probe", k, 2, 31) for k in keys},
        ),
    )


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn`` over about ``seconds`` (batches of 1000 calls)."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(1000):
            fn()
        calls += 1000
    return calls / elapsed


def pin_to_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to cpu {cpu}"
    return "not pinned"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    seconds = parser.parse_args().seconds

    op = typical_op()
    data = encode_op(op)
    assert decode_op(data) == op  # a bench of a broken codec would be meaningless
    schema, record = load_schema(), op_to_record(op)

    def fastavro_write() -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, record)
        return buf.getvalue()

    def fastavro_read() -> object:
        return fastavro.schemaless_reader(io.BytesIO(data), schema, None)

    print(f"op event: {len(data)} bytes, {len(op.value)} mops; {pin_to_one_core()}")
    for name, fn in [
        ("encode_op (model -> bytes)", lambda: encode_op(op)),
        ("decode_op (bytes -> model)", lambda: decode_op(data)),
        ("fastavro write (dict -> bytes)", fastavro_write),
        ("fastavro read (bytes -> dict)", fastavro_read),
    ]:
        print(f"{name:32s} {rate(fn, seconds):>10,.0f} events/s")


if __name__ == "__main__":
    main()
