"""The monitor's reading step (``decode.key_batch``) on Arrow batches, without Spark: one row per
(probe, key) carrying exactly ``split``'s fragments, dead letters by reason, and the clock."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kmon.history import avro
from kmon.history.fragment import split, to_row
from kmon.history.model import KeyPlacement, Op, OpMeta, clock_tick
from kmon.streaming import decode
from kmon.streaming.decode import unpack_fragments
from kmon.synth import SynthConfig, healthy

HEADER = avro.schema_header_value().decode()
SECOND = 1_000_000_000


def raw_batch(values: list[bytes | None], headers: list[str | None] | None = None,
              kafka_ms: list[int] | None = None) -> pa.RecordBatch:
    """What ``decode.raw_events`` hands the reading step: one Arrow row per Kafka record."""
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "value": pa.array(values, pa.binary()),
        "hdr": pa.array(headers or [HEADER] * n, pa.string()),
        "kts": pa.array(kafka_ms or [10**13] * n, pa.int64()),
        "topic": pa.array(["ev"] * n, pa.string()),
        "partition": pa.array([2] * n, pa.int32()),
        "offset": pa.array(range(100, 100 + n), pa.int64()),
    })


def rows_of(b: pa.RecordBatch) -> list[dict[str, Any]]:
    """The batch's rows, ``ets`` in microseconds."""
    assert b.schema == decode.KEY_ROW_SCHEMA
    rows = b.to_pylist()
    for r, us in zip(rows, b.column("ets").cast(pa.int64()).to_pylist(), strict=True):
        r["ets"] = us
    return rows


def test_each_key_gets_one_row_with_splits_fragments() -> None:
    ops = list(healthy(1_500, SynthConfig(keys=5, processes=3, keys_per_process=3)))
    ops.append(Op(9000, 7, 1, "ok", "poll", [("poll", {"s": [(0, "v")]})],
                  meta=OpMeta(probe="q", placements={"s": KeyPlacement("t", 3, leader=2)})))
    rows = rows_of(decode.key_batch(raw_batch([avro.encode_op(o) for o in ops])))
    got: dict[tuple, list] = {}
    for r in rows:
        key = decode.key_of(r["kl"], r["ks"])
        got[(r["probe"], key)] = [to_row(fr) for fr in unpack_fragments(key, r["blob"])]
    want: dict[tuple, list] = {}
    for o in ops:
        if o.type != "invoke":
            probe = o.meta.probe if o.meta else ""
            for fr in split(o):
                want.setdefault((probe, fr.key), []).append(to_row(fr))
    assert got == want
    string_key = next(r for r in rows if r["probe"] == "q")
    assert (string_key["kl"], string_key["ks"], string_key["topic"], string_key["part"],
            string_key["leader"], string_key["placed"]) == (0, "s", "t", 3, 2, 9000)
    assert {r["ets"] for r in rows} == {max(o.time for o in ops) // 1000}


def test_dead_letters_are_grouped_by_reason_with_their_source_and_raw_bytes() -> None:
    good = Op(1, 5 * SECOND, 1, "ok", "send", [("send", 1, 5, 0)], meta=OpMeta(probe="p"))
    ahead = Op(2, 500 * SECOND, 1, "ok", "send", [("send", 1, 6, 1)], meta=OpMeta(probe="p"))
    values = [avro.encode_op(good), b"junk", avro.encode_op(ahead), b"more junk", None]
    rows = rows_of(decode.key_batch(
        raw_batch(values, [HEADER, HEADER, HEADER, HEADER, None], [5_000] * 5),
        max_skew_ns=60 * SECOND))
    dead = {r["ks"]: decode.dead_letters(r["blob"]) for r in rows
            if r["probe"] == decode.DEAD_PROBE}
    assert dead == {
        decode.UNDECODABLE: [(b"junk", "ev:2:101"), (b"more junk", "ev:2:103")],
        decode.TIME_IN_FUTURE: [(values[2], "ev:2:102")],
        decode.NO_HEADER: [(None, "ev:2:104")],
    }
    # Only the valid event's time is the batch's clock.
    assert {r["ets"] for r in rows} == {5 * SECOND // 1000}


def test_a_batch_of_invokes_and_ticks_carries_its_clock_on_a_clock_row() -> None:
    invoke = Op(1, 7 * SECOND, 1, "invoke", "send", [("send", 1, 5, None)],
                meta=OpMeta(probe="p"))
    rows = rows_of(decode.key_batch(raw_batch([avro.encode_op(invoke),
                                               avro.encode_op(clock_tick(9 * SECOND, "p"))])))
    assert rows == [{"probe": decode.CLOCK_PROBE, "kl": 0, "ks": None, "topic": None,
                     "part": None, "leader": None, "placed": None, "blob": b"",
                     "ets": 9 * SECOND // 1000}]


def test_a_batch_of_nothing_valid_moves_no_clock() -> None:
    assert rows_of(decode.key_batch(raw_batch([]))) == []
    [row] = rows_of(decode.key_batch(raw_batch([b"junk"])))
    assert (row["probe"], row["ets"]) == (decode.DEAD_PROBE, None)
