"""Avro op events: one op per Kafka record, schemaless (fastavro), schema named by a header.

- Schemas are the packaged ``op_event_v<N>.avsc`` files; every version ever released stays, so
  an event is always decoded with the schema it was written with and resolved to the current one.
- Each record carries the header ``kmon-schema: op-event/<N>`` (``SCHEMA_HEADER``,
  ``schema_header_value``); ``version_from_headers`` reads it back. A missing or unknown header,
  garbage or truncated bytes all raise ``DecodeError`` and nothing else, so the monitor can
  dead-letter the event and go on.
- Keys and values are unions of long and string: ints and strings round-trip with their types.
- ``process`` is a long: ops of non-integer processes (Jepsen's ``"nemesis"``) and ops whose f
  is not one of the model's are not encodable (``EncodeError``).
- Normalisation (everything else round-trips exactly): ``meta=None`` and an all-default
  ``OpMeta()`` (empty probe id, nothing else) are the same event and decode as ``None``; a
  send/poll/txn/commit or assign/subscribe op with value None decodes with ``[]``; a crash op's
  value decodes as None.
- Versions: v2 added the ``commit`` op and micro-op (``Mop.f`` ``commit``: key and offset),
  ``group`` and ``starts``; v1 events decode with no group and no starts. v3 added a share
  group's ops (``share-poll``, ``ack``) and micro-ops (``Mop.f`` ``share-read``: key and
  ``share``, the records with their delivery counts; ``ack``: key, offset and ``outcome``), as
  trailing enum symbols and ``Mop`` fields. A reader that knows only older versions sends newer
  events to the dead letters (unknown version): upgrade monitors first.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any

import fastavro

from kmon.history.model import OP_FS, KeyPlacement, Op, OpMeta, Rebalance, Start
from kmon.history.wire import KEY_LIST_FS, MOP_LIST_FS

SCHEMA_VERSION = 3  # the version this code writes, and resolves older events to
SCHEMA_HEADER = "kmon-schema"  # Kafka header naming an event's writer schema
SCHEMA_NAME = "op-event"  # header value: "op-event/<version>"

_SCHEMA_FILE = re.compile(r"op_event_v([0-9]+)\.avsc\Z")
_HEADER_VALUE = re.compile(rf"{SCHEMA_NAME}/([0-9]+)\Z")
_NO_META = OpMeta()
# Avro's enum symbols are identifiers: the model's names with a hyphen are spelled with "_".
_F_SYMBOL = {"share-poll": "share_poll"}
_F_OF_SYMBOL = {v: k for k, v in _F_SYMBOL.items()}
_LONG = range(-(2**63), 2**63)


class EncodeError(ValueError):
    """An op the op event schema cannot carry."""


class DecodeError(ValueError):
    """Bytes or headers that are not a valid op event; the event belongs in the dead letters."""


# ---------------------------------------------------------------------------------------------
# Schemas and headers


@cache
def schema_versions() -> tuple[int, ...]:
    """Every packaged schema version, ascending."""
    names = (p.name for p in resources.files("kmon.history").iterdir())
    return tuple(sorted(int(m.group(1)) for n in names if (m := _SCHEMA_FILE.match(n))))


def schema_json(version: int = SCHEMA_VERSION) -> str:
    """The ``.avsc`` text of ``version`` (for Spark's ``from_avro`` or a schema registry)."""
    if version not in schema_versions():
        raise DecodeError(f"unknown op event schema version {version!r} (known: {_known()})")
    return resources.files("kmon.history").joinpath(f"op_event_v{version}.avsc").read_text()


@cache
def load_schema(version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The parsed (fastavro) schema of ``version``; DecodeError when it is not packaged."""
    return fastavro.parse_schema(json.loads(schema_json(version)))


def schema_header_value(version: int = SCHEMA_VERSION) -> bytes:
    return f"{SCHEMA_NAME}/{version}".encode("ascii")


def kafka_headers(version: int = SCHEMA_VERSION) -> list[tuple[str, bytes]]:
    """Headers for a produced op event (confluent-kafka's ``headers=`` shape)."""
    return [(SCHEMA_HEADER, schema_header_value(version))]


def version_from_header(value: bytes | str | None) -> int:
    """The schema version a ``kmon-schema`` header value names; DecodeError unless packaged."""
    text = value.decode("ascii", "replace") if isinstance(value, bytes | bytearray) else value
    m = _HEADER_VALUE.match(text) if isinstance(text, str) else None
    if m is None:
        raise DecodeError(f"header {SCHEMA_HEADER} is {value!r}, expected {SCHEMA_NAME}/<n>")
    version = int(m.group(1))
    if version not in schema_versions():
        raise DecodeError(f"unknown op event schema version {version} (known: {_known()})")
    return version


def version_from_headers(
    headers: Iterable[tuple[str, bytes | str | None]] | Mapping[str, Any] | None,
) -> int:
    """The schema version named by a record's headers (the last ``kmon-schema`` one wins)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    found: list[Any] = [v for k, v in pairs if k == SCHEMA_HEADER]
    if not found:
        raise DecodeError(f"no {SCHEMA_HEADER} header")
    return version_from_header(found[-1])


def _known() -> str:
    return ", ".join(map(str, schema_versions()))


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_op(op: Op) -> bytes:
    """``op`` as a schemaless Avro op event of the current schema version."""
    record = op_to_record(op)
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, load_schema(SCHEMA_VERSION), record)
    except (ValueError, TypeError, OverflowError) as e:  # fastavro names the offending field
        raise EncodeError(f"op {op.index}: {e}") from None
    return buf.getvalue()


def op_to_record(op: Op) -> dict[str, Any]:
    """``op`` as an op event record: a dict in the current schema's shape, for fastavro's writer
    (some union values are in its tuple notation, ``("long", 5)``)."""
    if type(op.process) is not int:
        raise EncodeError(
            f"op {op.index}: process {op.process!r} is not an integer; op events carry "
            "only client processes (nemesis ops are not encodable)"
        )
    if op.f not in OP_FS:
        raise EncodeError(f"op {op.index}: f {op.f!r} is not one of {'/'.join(OP_FS)}")
    meta = op.meta if op.meta is not None else _NO_META
    return {
        "schema_version": SCHEMA_VERSION,
        "probe": meta.probe,
        "index": op.index,
        "time": op.time,
        "invoke_time": meta.invoke_time,
        "process": op.process,
        "type": op.type,
        "f": _F_SYMBOL.get(op.f, op.f),
        "mops": [_mop_record(m) for m in op.value or ()] if op.f in MOP_LIST_FS else [],
        "keys": list(op.value or ()) if op.f in KEY_LIST_FS else [],
        "seek_to_beginning": meta.seek_to_beginning,
        "rebalance_log": [{"kind": r.kind, "keys": list(r.keys)} for r in op.rebalance_log],
        "transactional_id": meta.transactional_id,
        "txn_seq": meta.txn_seq,
        "deliberate_abort": meta.deliberate_abort,
        "error": meta.error,
        "placements": [_placement_record(k, p) for k, p in meta.placements.items()],
        "group": meta.group,
        "starts": [
            {"key": _branch(k), "offset": s.offset, "source": s.source}
            for k, s in meta.starts.items()
        ],
    }


def _mop_record(m: tuple) -> dict[str, Any]:
    if m[0] == "send":
        return {
            "f": "send",
            "key": _branch(m[1]),
            "value": _branch(m[2]),
            "offset": m[3],
            "reads": None,
            "share": None,
            "outcome": None,
        }
    if m[0] == "commit":
        return {"f": "commit", "key": _branch(m[1]), "value": None, "offset": m[2], "reads": None,
                "share": None, "outcome": None}
    if m[0] == "share-read":
        share = None if m[2] is None else ("array", [
            {"offset": o, "value": _branch(v), "delivery_count": c} for o, v, c in m[2]])
        return {"f": "share_read", "key": _branch(m[1]), "value": None, "offset": None,
                "reads": None, "share": share, "outcome": None}
    if m[0] == "ack":
        return {"f": "ack", "key": _branch(m[1]), "value": None, "offset": m[2], "reads": None,
                "share": None, "outcome": m[3]}
    reads = m[1]
    if reads is not None:
        reads = (
            "array",
            [
                {
                    "key": _branch(k),
                    "records": [{"offset": o, "value": _branch(v)} for o, v in pairs],
                }
                for k, pairs in reads.items()
            ],
        )
    return {"f": "poll", "key": None, "value": None, "offset": None, "reads": reads,
            "share": None, "outcome": None}


def _branch(x: Any) -> Any:
    """``x`` in fastavro's tuple notation naming its union branch: it spares fastavro a trial
    validation of each branch (for the nested reads array, a deep one), ~1.5x faster encoding.
    Anything not plainly a long or a string is passed as is, for fastavro to reject by name."""
    if type(x) is str:
        return ("string", x)
    if type(x) is int and x in _LONG:
        return ("long", x)
    return x


def _placement_record(k: Any, p: KeyPlacement) -> dict[str, Any]:
    return {
        "key": k,
        "topic": p.topic,
        "partition": p.partition,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
    }


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_op(data: bytes, version: int = SCHEMA_VERSION) -> Op:
    """The op in an event written with schema ``version``; DecodeError for anything invalid."""
    return record_to_op(decode_record(data, version))


def decode_record(data: bytes, version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The record (current schema shape) in an event written with schema ``version``;
    DecodeError when the bytes are not one. Not yet judged as an op (``record_to_op``)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"expected bytes, got {type(data).__name__}")
    writer = _writer_schema(version)
    reader = None if version == SCHEMA_VERSION else load_schema(SCHEMA_VERSION)
    buf = io.BytesIO(data)
    try:
        record = fastavro.schemaless_reader(buf, writer, reader)
    except Exception as e:  # garbage can trip fastavro in many ways; all mean the same here
        raise DecodeError(f"not an op event v{version}: {type(e).__name__}: {e}") from None
    if buf.read(1):
        raise DecodeError(f"not an op event v{version}: trailing bytes after the event")
    if record.get("schema_version") != version:
        raise DecodeError(
            f"event says schema_version {record.get('schema_version')!r}, header says {version}"
        )
    return record


def decode_event(data: bytes, headers: Any) -> Op:
    """The op in a Kafka record's value, its schema named by the record's headers."""
    return decode_op(data, version_from_headers(headers))


def _writer_schema(version: Any) -> dict[str, Any]:
    if type(version) is not int or version not in schema_versions():
        raise DecodeError(f"unknown op event schema version {version!r} (known: {_known()})")
    return load_schema(version)


def record_to_op(record: Mapping[str, Any]) -> Op:
    """An op event record (current schema shape) as a model ``Op``."""
    f = _F_OF_SYMBOL.get(record["f"], record["f"])
    if record["index"] < 0:
        raise DecodeError(f"negative op index {record['index']}")
    return Op(
        index=record["index"],
        time=record["time"],
        process=record["process"],
        type=record["type"],
        f=f,
        value=_value(f, record),
        rebalance_log=tuple(
            Rebalance(r["kind"], tuple(r["keys"])) for r in record["rebalance_log"]
        ),
        meta=_meta(record),
    )


def _meta(record: Mapping[str, Any]) -> OpMeta | None:
    meta = OpMeta(
        probe=record["probe"],
        transactional_id=record["transactional_id"],
        txn_seq=record["txn_seq"],
        deliberate_abort=record["deliberate_abort"],
        error=record["error"],
        seek_to_beginning=record["seek_to_beginning"],
        placements={p["key"]: _placement(p) for p in record["placements"]},
        group=record["group"],
        starts={s["key"]: Start(s["offset"], s["source"]) for s in record["starts"]},
        invoke_time=record["invoke_time"],
    )
    return None if meta == _NO_META else meta


def _value(f: str, record: Mapping[str, Any]) -> Any:
    if f in MOP_LIST_FS:
        return [_mop(m) for m in record["mops"]]
    if f in KEY_LIST_FS:
        return list(record["keys"])
    return None  # crash, or an f newer than this reader ("unknown")


def _mop(m: Mapping[str, Any]) -> tuple:
    if m["f"] == "send":
        if m["key"] is None or m["value"] is None:
            raise DecodeError("send mop without key or value")
        return ("send", m["key"], m["value"], m["offset"])
    if m["f"] == "commit":
        if m["key"] is None or m["offset"] is None:
            raise DecodeError("commit mop without key or offset")
        return ("commit", m["key"], m["offset"])
    if m["f"] == "share_read":
        if m["key"] is None:
            raise DecodeError("share-read mop without key")
        share = m["share"]
        return ("share-read", m["key"], None if share is None else [
            (x["offset"], x["value"], x["delivery_count"]) for x in share])
    if m["f"] == "ack":
        if m["key"] is None or m["offset"] is None or m["outcome"] is None:
            raise DecodeError("ack mop without key, offset or outcome")
        return ("ack", m["key"], m["offset"], m["outcome"])
    reads = m["reads"]
    if reads is None:
        return ("poll", None)
    return ("poll", {r["key"]: [(x["offset"], x["value"]) for x in r["records"]] for r in reads})


def _placement(p: Mapping[str, Any]) -> KeyPlacement:
    return KeyPlacement(p["topic"], p["partition"], p["leader"], p["leader_epoch"])
