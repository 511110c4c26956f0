"""Op events -> one row per (probe, key) per Arrow batch, carrying the key's fragments.

The Kafka source gives raw records. The JVM only picks the schema version header, the record's
timestamp and position; a ``mapInArrow`` step (``split_arrow``) then reads each Arrow batch of
raw values with kmon's compiled reader (``kmon.history.events``: the op event's binary
form read by hand, about ten times fastavro's rate), splits every op into per-key fragments,
and emits one row per (probe, key) with that key's fragments pickled in one binary value.

Why here and not in the JVM: decoding with ``from_avro`` and exploding each op into flat part
rows cost more than the fold itself (``docs/monitor.md``): tens of columns per part row went
through the JVM's expression evaluation, Arrow conversion and pandas, where one binary value
per key and batch now goes. The shuffle to the per-key fold then carries a few hundred rows
per micro-batch, not one per part, and the fold's frames have three columns.

1. **Schema**: the ``kmon-schema`` header names the writer schema (``op-event/<n>``); the
   current version is read by hand, older ones with the reference codec and resolved.
2. **Contract**: an event that does not decode or breaks the op event contract becomes a
   dead-letter row (probe ``DEAD_PROBE``, ``ks`` the reason, the raw values and their
   topic:partition:offset pickled in ``blob``) instead of fragments.
3. **Clock**: every row carries the batch's latest valid event time (``ets``); the watermark
   is set on it per events partition. Invokes and clock ticks make no fragments but count for
   the clock; a batch with no row to carry it emits a ``CLOCK_PROBE`` row the fold ignores.
   Dead letters' times never count: a garbage time must not move the watermark.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kmon.history import avro, events
from kmon.history.events import (  # noqa: F401  (the dead-letter reasons, named here too)
    FOLD_ERROR,
    NEGATIVE_INDEX,
    NEGATIVE_OFFSET,
    NEGATIVE_TIME,
    NO_HEADER,
    REASONS,
    SEND_WITHOUT_VALUE,
    TIME_IN_FUTURE,
    UNDECODABLE,
    UNKNOWN_VERSION,
    VERSION_MISMATCH,
)
from kmon.history.fragment import Fragment, FragmentRow, from_row, to_row
from kmon.streaming import collector

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Grouping keys no probe id can take (probe ids hold no NUL): dead letters under their reason,
# and rows that only carry the clock.
DEAD_PROBE = "\0dead-letter"
CLOCK_PROBE = "\0clock"

# The rows the reading step emits (``split_arrow``): the grouping key (probe, key as a long or
# 0, key as a string or null), the key's latest placement (topic, partition, leader broker or
# null, and the op index it came from: rows of one key arrive in any order), its fragments,
# the batch's clock.
KEY_ROW_SCHEMA = pa.schema([
    ("probe", pa.string()), ("kl", pa.int64()), ("ks", pa.string()),
    ("topic", pa.string()), ("part", pa.int32()), ("leader", pa.int32()),
    ("placed", pa.int64()), ("blob", pa.binary()), ("ets", pa.timestamp("us", tz="UTC")),
])
KEY_ROW_DDL = ("probe STRING, kl BIGINT, ks STRING, topic STRING, part INT, leader INT, "
               "placed BIGINT, blob BINARY, ets TIMESTAMP")


def header_version(headers: Column) -> Column:
    """The ``kmon-schema`` header's value (the last one wins) as a string, or null."""
    from pyspark.sql import functions as F

    pos = F.array_position(F.reverse(headers["key"]), F.lit(avro.SCHEMA_HEADER))
    value = F.try_element_at(F.reverse(headers["value"]), pos.cast("int"))
    return F.when(pos > 0, value.cast("string"))


def raw_events(raw: DataFrame) -> DataFrame:
    """Kafka source rows (``includeHeaders``) -> what the reading step needs of each."""
    from pyspark.sql import functions as F

    return raw.select("value", header_version(F.col("headers")).alias("hdr"),
                      F.unix_millis("timestamp").alias("kts"), "topic", "partition", "offset")


def key_rows(raw: DataFrame | Sequence[DataFrame], watermark_delay: str | None = None,
             max_future_skew_ms: int | None = None) -> DataFrame:
    """Kafka source rows -> key rows (``KEY_ROW_SCHEMA`` without ``ets``), one stream.

    ``watermark_delay`` (e.g. ``"5 seconds"``) sets the event-time watermark on each stream's
    ``ets``. Several sources (the monitor's: one per events partition) each get their own
    watermark before they are united, and Spark's global watermark is then the lowest of them
    (``spark.sql.streaming.multipleWatermarkPolicy`` = min, the default). ``ets`` is dropped
    right after, so the stateful operator has no watermarked input column and never drops late
    rows: they are folded like any other (a late poll must still clear a candidate lost
    write); only verdicts wait for the watermark.

    ``max_future_skew_ms``: events whose time is further ahead of their Kafka timestamp are
    dead letters (one such event would drag the watermark into the future and force every
    pending verdict early); None disables the check.
    """
    skew = None if max_future_skew_ms is None else max_future_skew_ms * 1_000_000
    split = functools.partial(split_arrow, max_skew_ns=skew)
    streams = [raw_events(r).mapInArrow(split, KEY_ROW_DDL)
               for r in (raw if isinstance(raw, list | tuple) else [raw])]
    if watermark_delay is not None:
        streams = [s.withWatermark("ets", watermark_delay) for s in streams]
    return functools.reduce(lambda a, b: a.union(b), streams).drop("ets")


def split_arrow(batches: Iterator[pa.RecordBatch],
                max_skew_ns: int | None = None) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: each Arrow batch of raw events -> its key rows."""
    for b in batches:
        with collector.paused():
            rows = key_batch(b, max_skew_ns)
        yield rows


def key_batch(b: pa.RecordBatch, max_skew_ns: int | None = None) -> pa.RecordBatch:
    """One Arrow batch of ``raw_events`` -> one row per (probe, key), dead letters by reason."""
    values = b.column("value").to_pylist()
    s = events.split_batch(values, b.column("hdr").to_pylist(), b.column("kts").to_pylist(),
                           max_skew_ns)
    cols: dict[str, list[Any]] = {n: [] for n in KEY_ROW_SCHEMA.names}
    for (probe, key), frags in s.groups.items():
        _row(cols, probe, key, s.placements.get((probe, key)), pack_fragments(frags))
    if s.dead:
        srcs = [f"{t}:{p}:{o}" for t, p, o in zip(b.column("topic").to_pylist(),
                                                  b.column("partition").to_pylist(),
                                                  b.column("offset").to_pylist(), strict=True)]
        by_reason: dict[str, list[tuple[bytes | None, str]]] = {}
        for i, reason in s.dead:
            by_reason.setdefault(reason, []).append((values[i], srcs[i]))
        for reason, letters in by_reason.items():
            _row(cols, DEAD_PROBE, reason, None, pickle.dumps(letters, protocol=5))
    if not cols["probe"] and s.max_time >= 0:
        _row(cols, CLOCK_PROBE, 0, None, b"")
    ets = None if s.max_time < 0 else s.max_time // 1000
    cols["ets"] = [ets] * len(cols["probe"])
    return pa.RecordBatch.from_pydict(cols, schema=KEY_ROW_SCHEMA)


def _row(cols: dict[str, list[Any]], probe: str, key: Any, pl: events.Placement | None,
         blob: bytes) -> None:
    cols["probe"].append(probe)
    # The grouping key carries no nulls where pandas would make floats of it (the state store
    # key would not round-trip): a string key has kl 0.
    cols["kl"].append(key if type(key) is int else 0)
    cols["ks"].append(key if type(key) is str else None)
    if pl is None:
        cols["topic"].append(None)
        cols["part"].append(None)
        cols["leader"].append(None)
        cols["placed"].append(None)
    else:
        cols["topic"].append(pl.topic)
        cols["part"].append(pl.partition)
        cols["leader"].append(pl.leader)
        cols["placed"].append(pl.op)
    cols["blob"].append(blob)


def pack_fragments(frags: list[Fragment]) -> bytes:
    """One key's fragments as one value, for the shuffle from the reading step to the fold
    (fragment rows are tuples of ints, strings, lists and None: pickle writes them in C)."""
    return pickle.dumps([to_row(fr) for fr in frags], protocol=5)


def unpack_fragments(key: Any, blob: bytes) -> list[Fragment]:
    """``pack_fragments``'s value back as fragments of ``key``. Only ever given what the
    monitor's own reading step packed, never bytes from outside."""
    rows: list[FragmentRow] = pickle.loads(blob)
    return [from_row(key, r) for r in rows]


def key_of(kl: Any, ks: Any) -> Any:
    """The checker key from the grouping key's long and string parts."""
    return ks if ks is not None else int(kl)


def dead_letters(blob: bytes) -> list[tuple[bytes | None, str]]:
    """A dead-letter row's events: (raw value, topic:partition:offset) each."""
    letters: list[tuple[bytes | None, str]] = pickle.loads(blob)
    return letters
