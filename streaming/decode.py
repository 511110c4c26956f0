"""Op events -> per-key part rows, entirely in the JVM.

The Kafka source gives raw records; this module turns them into the rows the per-key stateful
processor folds, with Spark SQL expressions only (no Python UDF): fastavro decodes nested op
events at a few tens of thousands per second per core, Spark's ``from_avro`` many times that.

1. **Schema**: the ``kmon-schema`` header names the writer schema (``op-event/<n>``); each
   packaged version is decoded with its own ``.avsc`` and resolved to the current one.
2. **Contract**: an event that does not decode or breaks the op event contract gets a dead-letter
   ``reason`` (``REASONS``) and yields exactly one dead-letter row instead of parts.
3. **Explode**: a valid event yields one row per part of the op that touches a key (each send,
   each key's records in each poll, each key assigned or rebalanced), as flat columns of
   primitives and primitive arrays, which Arrow hands to pandas cheaply. Grouped by key, one
   op's parts of a key make exactly the fragment ``kmon.checker.fragment.split`` makes (see
   ``frames``). Invokes (the fold learns nothing from them) and crash ops yield no row.

Keys and values are Avro unions of long and string; a column pair carries them (the long, or 0,
and the string, or null). A read's string arrays are empty unless some value in it is a string,
so the common all-int case costs one primitive array. Unknown send offsets are -1.

Every expression here is lambda-free (array-of-struct field extraction, ``arrays_zip`` and
positional struct casts instead of ``transform``/``filter``): Spark cannot compile lambdas, and
one in a projection turns off whole-stage code generation for it. Everything is also safe on
any input (``try_`` functions, nothing that can overflow): a Spark expression error would fail
the query, and the query must never die on data.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

# Part kinds (the ``kind`` column), defined where parts become fragments.
from kmon.checker.parts import ASSIGNED, DEAD, READ, READ_STR, REBALANCED, SEND
from kmon.history import avro

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Dead-letter reasons: the ``reason`` label of ``kmon_dead_letters_total``.
NO_HEADER = "no-schema-header"
UNKNOWN_VERSION = "unknown-schema-version"
UNDECODABLE = "undecodable"
VERSION_MISMATCH = "schema-version-mismatch"
NEGATIVE_INDEX = "negative-index"
NEGATIVE_TIME = "negative-time"
SEND_WITHOUT_VALUE = "send-without-key-or-value"
NEGATIVE_OFFSET = "negative-offset"
TIME_IN_FUTURE = "time-in-future"
FOLD_ERROR = "fold-error"  # raised by the processor, not here: a bug or an unforeseen shape
REASONS = (NO_HEADER, UNKNOWN_VERSION, UNDECODABLE, VERSION_MISMATCH, NEGATIVE_INDEX,
           NEGATIVE_TIME, SEND_WITHOUT_VALUE, NEGATIVE_OFFSET, TIME_IN_FUTURE, FOLD_ERROR)

# The ``probe`` of dead-letter rows (their ``ks`` is the reason): no probe id holds a NUL.
DEAD_PROBE = "\0dead-letter"

# Columns of a part row, in order (the processor's input contract).
PART_COLUMNS = (
    "probe", "kl", "ks",  # grouping key: probe id, key as long (or 0) / string (or null)
    "idx", "proc", "type", "f", "t", "it",  # op index, process, type, f, time, invoke time
    "pos", "kind",  # position of the part in the op; SEND / READ / ... (below)
    "sv", "ss", "so",  # send: value as long (or 0), as string (or null), offset (-1: unknown)
    "r_off", "r_val", "r_str", "r_vs",  # read: offsets, values as longs, and two empty arrays;
    #                            or, when some are strings: null, the strings, the longs as text
    "nw",  # values the whole op wrote (ops writing two or more are checked for atomicity)
    "topic", "part",  # the key's placement, if the event carried one
    "dl_raw", "dl_src",  # dead letters: the raw value and topic:partition:offset
)

_KEY = "STRUCT<member0: BIGINT, member1: STRING>"
_NO_STRINGS = "CAST(array() AS ARRAY<STRING>)"
_READS = f"ARRAY<STRUCT<key: {_KEY}, records: ARRAY<STRUCT<offset: BIGINT, value: {_KEY}>>>>"
# One part before the per-key explode of polls: kind, key, value, offset, reads (a poll's
# per-key records; exploded next).
_PART = f"STRUCT<kind: STRING, k: {_KEY}, v: {_KEY}, o: BIGINT, r: {_READS}>"
_PARTS = f"ARRAY<{_PART}>"


def header_version(headers: Column) -> Column:
    """The ``kmon-schema`` header's value (the last one wins) as a string, or null."""
    from pyspark.sql import functions as F

    pos = F.array_position(F.reverse(headers["key"]), F.lit(avro.SCHEMA_HEADER))
    value = F.try_element_at(F.reverse(headers["value"]), pos.cast("int"))
    return F.when(pos > 0, value.cast("string"))


def decoded(raw: DataFrame, max_future_skew_ms: int | None = None) -> DataFrame:
    """Kafka source rows -> ``e`` (the decoded event, current schema) and ``reason``.

    ``raw`` needs ``value``, ``headers`` (``includeHeaders``), ``timestamp``, ``topic``,
    ``partition`` and ``offset``. ``max_future_skew_ms``: events whose time is further ahead
    of their Kafka timestamp are dead letters (one such event would drag the watermark into
    the future and force every pending verdict early); None disables the check.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    current = avro.schema_json(avro.SCHEMA_VERSION)
    hdr = header_version(F.col("headers"))
    version = F.regexp_extract(hdr, rf"^{avro.SCHEMA_NAME}/([0-9]+)$", 1)
    event = None
    for v in avro.schema_versions():
        options = {"mode": "PERMISSIVE"}
        if v != avro.SCHEMA_VERSION:
            options["avroSchema"] = current  # resolve older writers to the current reader
        dec = from_avro(F.col("value"), avro.schema_json(v), options)
        event = F.when(version == str(v), dec) if event is None else event.when(
            version == str(v), dec)
    df = raw.select(
        "value", "timestamp", "topic", "partition", "offset",
        hdr.alias("hdr"), version.alias("hver"), event.alias("e"))
    known = F.lit(False)
    for v in avro.schema_versions():
        known = known | (F.col("hver") == str(v))
    # A send mop with a null key or value; poll mops never carry either.
    sends = "CAST(arrays_zip(e.mops.f, e.mops.{0}) AS ARRAY<STRUCT<f: STRING, x: {1}>>)"
    no_key = "named_struct('f', 'send', 'x', CAST(NULL AS {0}))"
    missing = " OR ".join(f"array_contains({sends.format(f, _KEY)}, {no_key.format(_KEY)})"
                          for f in ("key", "value"))
    # Every offset a poll read (send mops' reads are null; array_except drops them).
    records = f"flatten(flatten(array_except(e.mops.reads, array(CAST(NULL AS {_READS})))).records)"
    reason = (
        F.when(F.col("hdr").isNull(), F.lit(NO_HEADER))
        .when(~known, F.lit(UNKNOWN_VERSION))
        # Required fields are null only when Avro could not decode the bytes.
        .when(F.col("e.index").isNull() | F.col("e.time").isNull()
              | F.col("e.type").isNull() | F.col("e.probe").isNull(), F.lit(UNDECODABLE))
        .when(F.col("e.schema_version") != F.expr("try_cast(hver AS INT)"),
              F.lit(VERSION_MISMATCH))
        .when(F.col("e.index") < 0, F.lit(NEGATIVE_INDEX))
        .when(F.col("e.time") < 0, F.lit(NEGATIVE_TIME))
        # Poll mops carry no key or value; any other null key or value is a send's.
        .when(F.expr(missing), F.lit(SEND_WITHOUT_VALUE))
        .when(F.expr(f"array_min(e.mops.offset) < 0 OR array_min({records}.offset) < 0"),
              F.lit(NEGATIVE_OFFSET))
    )
    if max_future_skew_ms is not None:
        # In doubles: garbage times must not overflow (which would fail the query).
        ahead = F.col("e.time").cast("double") / 1e6 > (
            F.unix_millis(F.col("timestamp")) + F.lit(max_future_skew_ms)).cast("double")
        reason = reason.when(ahead, F.lit(TIME_IN_FUTURE))
    return df.withColumn("reason", reason)


def _parts_of(keys: str, kind: str) -> str:
    """``keys`` (an array of keys) as parts of ``kind`` (lambda-free: zip, then rename)."""
    n = f"size({keys})"
    return (f"CAST(arrays_zip(array_repeat('{kind}', {n}), {keys},"
            f" array_repeat(CAST(NULL AS {_KEY}), {n}), array_repeat(CAST(NULL AS BIGINT), {n}),"
            f" array_repeat(CAST(NULL AS {_READS}), {n})) AS {_PARTS})")


_OK = "reason IS NULL"  # a valid event
_MOP = "e.f IN ('send', 'poll', 'txn')"  # an op of micro-ops


def _event_columns(dec: DataFrame) -> DataFrame:
    """Per event, only the scalars the parts need, so the explodes do not copy the whole event
    into every row they make (``e`` itself is used by the first explode only)."""
    from pyspark.sql import functions as F

    sends = "size(e.mops) - size(array_remove(e.mops.f, 'send'))"
    valid = F.col("reason").isNull()
    return dec.select(
        F.when(valid, F.col("e.probe")).otherwise(F.lit(DEAD_PROBE)).alias("probe"),
        # No nulls in numeric part columns (dead letters get 0): one null inside a packed
        # list would turn every key's list of that column into floats in pandas.
        F.coalesce(F.col("e.index"), F.lit(0)).alias("idx"),
        F.coalesce(F.col("e.process"), F.lit(0)).alias("proc"),
        F.col("e.type").alias("type"),
        F.col("e.f").alias("f"),
        F.coalesce(F.col("e.time"), F.lit(0)).alias("t"),
        F.coalesce(F.col("e.invoke_time"), F.col("e.time"), F.lit(0)).alias("it"),
        F.expr(f"IF({_OK} AND {_MOP}, {sends}, 0)").alias("nw"),
        F.col("e.placements.key").alias("pl_key"),
        F.col("e.placements.topic").alias("pl_topic"),
        F.col("e.placements.partition").alias("pl_part"),
        F.col("reason"),
        F.when(~valid, F.col("value")).alias("dl_raw"),
        F.when(~valid, F.concat_ws(":", "topic", "partition", "offset")).alias("dl_src"),
        "e",  # only for the parts, made inside the explode (not copied into each part row)
        F.expr(f"IF({_OK}, timestamp_micros(e.time div 1000), NULL)").alias("ets"),
    )


def fragments(dec: DataFrame | Sequence[DataFrame], watermark_delay: str | None = None,
              keep_time: bool = False) -> DataFrame:
    """Decoded events (``decoded``) -> part rows (``PART_COLUMNS``), one pass.

    A valid event yields one row per *part*: each send mop, each key's records in each poll
    mop, each key an assign/subscribe completion named, each key a rebalance during the op
    touched; ``pos`` keeps their order within the op. The processor merges one op's parts of a
    key into the fragment ``split`` would make (``frames.fragments``).

    A rejected event yields one dead-letter row (probe ``DEAD_PROBE``, ``ks`` = the reason,
    ``kind`` ``DEAD``, the raw value and its source position).

    ``watermark_delay`` (e.g. ``"5 seconds"``) sets the event-time watermark on the valid
    events' ``time``. Several decoded streams (the monitor's: one per events partition) each
    get their own watermark before they are united, and Spark's global watermark is then the
    lowest of them (``spark.sql.streaming.multipleWatermarkPolicy`` = min, the default).
    The time column is dropped right after, so the stateful operator has no watermarked input
    column and never drops late events: they are folded like any other (a late poll must still
    clear a candidate lost write); only verdicts wait for the watermark.
    Dead letters have a null time: a garbage time must not move the watermark.
    """
    from pyspark.sql import functions as F

    ok, mop = _OK, _MOP
    done = "e.type <> 'invoke'"
    # mops as parts: a send keeps key/value/offset; a poll keeps its reads (exploded next).
    mops = (f"CAST(arrays_zip(e.mops.f, e.mops.key, e.mops.value, e.mops.offset, e.mops.reads)"
            f" AS {_PARTS})")
    akeys = f"IF({done} AND e.f IN ('assign', 'subscribe'), e.keys, array())"
    rkeys = f"IF({done}, flatten(e.rebalance_log.keys), array())"
    dead = f"array(CAST(named_struct('kind', 'dead', 'k', NULL, 'v', NULL, 'o', NULL," \
           f" 'r', NULL) AS {_PART}))"
    # Invokes carry nothing the fold uses (a read that beats its writer's completion waits for
    # the completion), so only completions make parts; invokes still move the watermark.
    parts = (f"IF({ok}, concat(IF({mop} AND {done}, {mops}, CAST(array() AS {_PARTS})),"
             f" {_parts_of(akeys, 'assign')}, {_parts_of(rkeys, 'rebalance')}), {dead})")
    valid = F.col("reason").isNull()
    streams = [_event_columns(d) for d in (dec if isinstance(dec, list | tuple) else [dec])]
    if watermark_delay is not None:
        streams = [e.withWatermark("ets", watermark_delay) for e in streams]
    events = functools.reduce(lambda a, b: a.union(b), streams)
    # Level 1: one row per mop / assigned key / rebalanced key. Level 2: a poll's reads, one
    # row per key; a poll of no key (or a poll's invoke) leaves no row, any other part one.
    # (Outer explodes: for a plain one Spark infers a "size(parts) > 0" filter and pushes it
    # below the projections, where it would decode every event dozens of times over.)
    level1 = events.select(
        "*", F.posexplode_outer(F.expr(parts)).alias("p1", "p")
    ).where("p IS NOT NULL").select(
        "probe", "idx", "proc", "type", "f", "t", "it", "nw", "pl_key", "pl_topic", "pl_part",
        "reason", "dl_raw", "dl_src", "ets", "p1", F.col("p.kind").alias("pk"),
        F.col("p.k").alias("pkey"),
        F.col("p.v").alias("pv"), F.col("p.o").alias("po"), F.col("p.r").alias("pr"))
    level2 = level1.select(
        "*", F.posexplode_outer("pr").alias("p2", "x")
    ).where("pk <> 'poll' OR x IS NOT NULL")
    rstr = "x.records.value.member1"
    strings = f"array_max({rstr}) IS NOT NULL"  # array_max skips nulls
    kind = (F.when(F.col("x").isNotNull() & F.expr(strings), F.lit(READ_STR))
            .when(F.col("x").isNotNull(), F.lit(READ))
            .when(F.col("pk") == "send", F.lit(SEND))
            .when(F.col("pk") == "assign", F.lit(ASSIGNED))
            .when(F.col("pk") == "rebalance", F.lit(REBALANCED))
            .otherwise(F.lit(DEAD)))
    key = F.coalesce(F.col("x.key"), F.col("pkey"))
    ppos = "CAST(array_position(pl_key, coalesce(x.key, pkey)) AS INT)"
    return level2.select(
        "probe",
        # Grouping key columns carry no nulls where pandas would make floats of them (the
        # state store key would not round-trip): a string key has kl 0.
        F.coalesce(key["member0"], F.lit(0)).alias("kl"),
        F.when(valid, key["member1"]).otherwise(F.col("reason")).alias("ks"),
        "idx", "proc", "type", "f", "t", "it",
        (F.col("p1").cast("long") * 65536 + F.coalesce(F.col("p2"), F.lit(0))).alias("pos"),
        kind.alias("kind"),
        F.coalesce(F.col("pv.member0"), F.lit(0)).alias("sv"),
        F.col("pv.member1").alias("ss"),
        F.coalesce(F.col("po"), F.lit(-1)).alias("so"),
        F.col("x.records.offset").alias("r_off"),
        # A null inside an int array would make it floats in pandas: when strings are among
        # the values, the longs come as text in r_vs instead (rare, exact).
        F.expr(f"IF({strings}, NULL, x.records.value.member0)").alias("r_val"),
        # Empty, not null, when there are no strings: Spark's Arrow writer (mapInArrow, next)
        # takes about 14 us per null string array, more in larger batches (two such columns
        # cost twice from_avro and the explode together); an empty array costs next to nothing.
        F.expr(f"IF({strings}, {rstr}, {_NO_STRINGS})").alias("r_str"),
        F.expr(f"IF({strings}, CAST(x.records.value.member0 AS ARRAY<STRING>), {_NO_STRINGS})")
        .alias("r_vs"),
        "nw",
        F.expr(f"IF({ppos} > 0, try_element_at(pl_topic, {ppos}), NULL)").alias("topic"),
        F.expr(f"IF({ppos} > 0, coalesce(try_element_at(pl_part, {ppos}), -1), -1)")
        .alias("part"),  # -1: no placement (the topic is null then)
        "dl_raw", "dl_src", *(["ets"] if keep_time else []),
    )
