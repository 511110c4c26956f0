"""Jepsen's wire shapes of an op, to and from the model; shared by the JSON, JSONL and EDN codecs.

One op on the wire is a JSON object or an EDN map (EDN keywords arrive as strings without the
colon: ``:send`` is ``"send"``). Field names, with the aliases the loader also accepts:

=======================  ====================================================================
``index``                int >= 0, optional: when absent, the previous op's index + 1 (0
                         first); indices must increase through a file
``time``                 int nanoseconds, optional (0 when absent)
``process``              int, or a string such as Jepsen's ``"nemesis"``
``type``                 ``invoke`` / ``ok`` / ``fail`` / ``info`` (anything else is an error)
``f``                    ``send`` / ``poll`` / ``txn`` / ``commit`` / ``share-poll`` / ``ack``
                         / ``assign`` / ``subscribe`` / ``crash``; other strings (nemesis ops
                         such as ``start-partition``) are kept as is
``value``                send/poll/txn/commit/share-poll/ack: a list of micro-ops;
                         assign/subscribe: a list of keys; any other f: kept as is
``rebalance-log``        (``rebalance_log``) Jepsen's ``[{"type": "revoked", "keys": [k, ...]},
                         ...]``; other shapes are read leniently: every map with ``keys`` is
                         one event, kind from ``type`` or ``kind`` (``""`` when absent), maps
                         without ``keys`` (``{"before": [...], "during": [...]}``) are searched,
                         a bare list of keys is one event of kind ``""``
``seek-to-beginning?``   (``seek-to-beginning``, ``seek_to_beginning``) bool, on assign ops
=======================  ====================================================================

kmon probe extras (each optional; an op carrying none of them nor ``seek-to-beginning?`` has
``meta = None``, otherwise an ``OpMeta``; the writer always emits ``probe`` when meta is set):

======================  ======================================================================
``probe``               string, the probe instance id
``transactional-id``    (``transactional_id``) string or null
``txn-seq``             (``txn_seq``) int or null: transaction number within the id
``deliberate-abort``    (``deliberate-abort?``, ``deliberate_abort``) bool. Jepsen's own
                        ``{"type": "abort", "body-error": {"type": "intentional-abort"}}`` error
                        also sets it.
``error``               string; any other value (Jepsen's ``:timeout``, vectors, maps) is kept
                        as its compact JSON text
``placements``          ``[{"key": k, "topic": t, "partition": p, "leader": id|null,
                        "leader-epoch": e|null}, ...]`` (``leader_epoch`` accepted)
``invoke-time``         (``invoke_time``) int or null: on a completion, its invocation's time
``group``               string or null: the consumer group of the op's offset commits and
                        assignments
``starts``              ``[{"key": k, "offset": off|null, "source": s}, ...]``: where each
                        partition the op assigned started; ``source`` is ``committed``,
                        ``reset``, ``restored`` or ``client`` (``kmon.history.model.Start``;
                        other strings are kept, for sources newer than this reader)
======================  ======================================================================

Micro-ops (keys and values are ints or strings; offsets ints):

- ``["send", k, v]`` as invoked; ``["send", k, [offset, v]]`` completed (offset may be null); a
  completion carrying the bare value means the offset is unknown. Jepsen's documented
  ``["send", k, offset, v]`` is accepted too.
- ``["poll"]`` (or ``["poll", null]``) as invoked; ``["poll", {k: [[offset, v], ...]}]``
  completed; kmon's typed form ``["poll", [[k, [[offset, v], ...]], ...]]`` is accepted too.
- ``["commit", k, offset]``: the consumer group's committed offset of ``k`` set to ``offset`` (the
  next offset to read), in ``commit`` ops and in ``txn`` ops (offsets sent with the transaction).
  Jepsen has no such micro-op; kmon's probes write it.
- ``["share-read", k]`` (or ``["share-read", k, null]``): a share poll that may acquire records
  of ``k``, as invoked or completed with its records unknown; ``["share-read", k, [[offset, v,
  delivery_count], ...]]``: the records of ``k`` a share poll delivered (``share-poll`` ops).
- ``["ack", k, offset, outcome]``: a share consumer's acknowledgement, ``outcome`` one of
  ``accept``, ``release``, ``reject`` (``ack`` ops). Share ops name their share group in
  ``group``.

**Key typing (JSON and JSONL only).** A JSON object key is always a string, so the loader decides
the type of each key of a poll's object form from the keys seen *in typed positions* so far in the
file (send, commit, share-read and ack keys, assign/subscribe values, rebalance-log keys,
placement and start keys; the current op's included):

1. a key that is not a canonical decimal integer (``0``, ``42``, ``-7``; not ``007``, ``+1``,
   ``1.0``) is a string;
2. otherwise it is an int if that int has been seen as a key,
3. else a string if that string has been seen as a key (``"1"`` sent as a string is polled as
   ``"1"``),
4. else an int (Jepsen's keys are ints).

EDN keeps key types, so the rule does not apply to it. The writer mirrors the rule and emits the
typed poll form exactly when the object form would be read back as a different key, so a history
written with ``dump_jsonl`` loads back equal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kmon.history.errors import HistoryError
from kmon.history.model import (
    ACK_OUTCOMES,
    MOP_FS,
    OP_TYPES,
    SHARE_FS,
    Key,
    KeyPlacement,
    Op,
    OpMeta,
    Rebalance,
    Start,
)

KEY_LIST_FS = frozenset(("assign", "subscribe"))
# Ops whose value is a list of micro-ops: the workload's (MOP_FS), offset commits and a share
# group's ops.
MOP_LIST_FS = MOP_FS | frozenset(("commit",)) | SHARE_FS
_TYPED_MOPS = ("send", "commit", "share-read", "ack")  # mops whose key keeps its JSON type

# Canonical name -> every spelling the loader accepts, canonical first.
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "rebalance-log": ("rebalance-log", "rebalance_log"),
    "seek-to-beginning?": ("seek-to-beginning?", "seek-to-beginning", "seek_to_beginning"),
    "probe": ("probe",),
    "transactional-id": ("transactional-id", "transactional_id"),
    "txn-seq": ("txn-seq", "txn_seq"),
    "deliberate-abort": ("deliberate-abort", "deliberate-abort?", "deliberate_abort"),
    "error": ("error",),
    "placements": ("placements",),
    "invoke-time": ("invoke-time", "invoke_time"),
    "group": ("group",),
    "starts": ("starts",),
}
META_FIELDS = tuple(name for name in FIELD_ALIASES if name != "rebalance-log")

_DECIMAL = re.compile(r"(?:0|-?[1-9][0-9]*)\Z")
_MISSING = object()


class KeyTyping:
    """Keys seen so far in typed positions; decides what a JSON object key string stands for."""

    __slots__ = ("ints", "strs")

    def __init__(self) -> None:
        self.ints: set[int] = set()
        self.strs: set[str] = set()

    def note(self, keys: Iterable[Key]) -> None:
        for k in keys:
            (self.ints if isinstance(k, int) else self.strs).add(k)

    def read(self, s: str) -> Key:
        """The key a poll-map key string stands for (rules 1-4 of the module docstring)."""
        if not _DECIMAL.match(s):
            return s
        n = int(s)
        if n in self.ints or s not in self.strs:
            return n
        return s


# ---------------------------------------------------------------------------------------------
# Reading


def op_from_wire(
    raw: Mapping[str, Any],
    *,
    index: int = 0,
    typing: KeyTyping | None = None,
) -> Op:
    """One wire op (already plain Python: dicts, lists, str, int, ...) as a model ``Op``.

    ``index`` is used when the op has none. ``typing`` is given for JSON input, whose poll-map
    keys are strings (and is updated with this op's typed keys); ``None`` keeps keys as they are.
    Raises ``HistoryError`` naming the field; the caller adds the line.
    """
    if not isinstance(raw, Mapping):
        raise HistoryError(f"expected an op (an object/map), got {show(raw)}")
    type_ = _field(raw, "type")
    if type_ not in OP_TYPES:
        raise HistoryError(f"expected one of {'/'.join(OP_TYPES)}, got {show(type_)}", field="type")
    f = _field(raw, "f")
    if not isinstance(f, str):
        raise HistoryError(f"expected a string, got {show(f)}", field="f")
    rebalance_log = _rebalance_log(_get(raw, "rebalance-log", None))
    meta = _meta(raw)
    if typing is not None:
        _note_typed_keys(raw, f, rebalance_log, meta, typing)
    return Op(
        index=_int(raw.get("index", index), "index", minimum=0),
        time=_int(raw.get("time", 0), "time"),
        process=_process(_field(raw, "process")),
        type=type_,
        f=f,
        value=_value(f, raw.get("value"), typing),
        rebalance_log=rebalance_log,
        meta=meta,
    )


def _field(raw: Mapping[str, Any], name: str) -> Any:
    value = raw.get(name, _MISSING)
    if value is _MISSING:
        raise HistoryError("missing", field=name)
    return value


def _get(raw: Mapping[str, Any], name: str, default: Any) -> Any:
    for alias in FIELD_ALIASES[name]:
        if alias in raw:
            return raw[alias]
    return default


def _int(x: Any, field: str, *, minimum: int | None = None, optional: bool = False) -> Any:
    if x is None and optional:
        return None
    if type(x) is not int or (minimum is not None and x < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise HistoryError(f"expected an integer{bound}, got {show(x)}", field=field)
    return x


def _process(x: Any) -> int | str:
    if type(x) is int or type(x) is str:
        return x
    raise HistoryError(f"expected an integer or a string, got {show(x)}", field="process")


def key(x: Any, field: str) -> Key:
    """``x`` as a key (int or str, not bool), or a HistoryError naming ``field``."""
    if type(x) is int or type(x) is str:
        return x
    raise HistoryError(f"expected a key (integer or string), got {show(x)}", field=field)


def _message_value(x: Any, field: str) -> int | str:
    if type(x) is int or type(x) is str:
        return x
    raise HistoryError(f"expected a value (integer or string), got {show(x)}", field=field)


def _value(f: str, value: Any, typing: KeyTyping | None) -> Any:
    if f in MOP_LIST_FS:
        items = _list(value, "value", "a list of micro-ops")
        return [_mop(m, f"value[{i}]", typing) for i, m in enumerate(items)]
    if f in KEY_LIST_FS:
        items = _list(value, "value", "a list of keys")
        return [key(k, f"value[{i}]") for i, k in enumerate(items)]
    return value


def _list(value: Any, field: str, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise HistoryError(f"expected {what}, got {show(value)}", field=field)
    return value


def _mop(m: Any, field: str, typing: KeyTyping | None) -> tuple:
    head = m[0] if isinstance(m, list) and m else None
    if head == "send":
        return _send(m, field)
    if head == "poll":
        return _poll(m, field, typing)
    if head == "commit":
        return _commit(m, field)
    if head == "share-read":
        return _share_read(m, field)
    if head == "ack":
        return _ack(m, field)
    raise HistoryError(
        f'expected ["send", key, value], ["poll", ...], ["commit", key, offset], ["share-read", '
        f'key, records] or ["ack", key, offset, outcome], got {show(m)}', field=field,
    )


def _share_read(m: list, field: str) -> tuple:
    if len(m) == 2 or (len(m) == 3 and m[2] is None):
        return ("share-read", key(m[1], field), None)
    if len(m) != 3 or not isinstance(m[2], list):
        raise HistoryError(f'expected ["share-read", key, records], got {show(m)}', field=field)
    out = []
    for r in m[2]:
        if not isinstance(r, list) or len(r) != 3:
            raise HistoryError(f"expected [offset, value, delivery_count], got {show(r)}",
                               field=field)
        out.append((_int(r[0], field), _message_value(r[1], field), _int(r[2], field)))
    return ("share-read", key(m[1], field), out)


def _ack(m: list, field: str) -> tuple:
    if len(m) != 4:
        raise HistoryError(f'expected ["ack", key, offset, outcome], got {show(m)}', field=field)
    if m[3] not in ACK_OUTCOMES:
        raise HistoryError(f"expected one of {'/'.join(ACK_OUTCOMES)}, got {show(m[3])}",
                           field=field)
    return ("ack", key(m[1], field), _int(m[2], field), m[3])


def _send(m: list, field: str) -> tuple:
    if len(m) == 4:  # Jepsen's documented [:send k offset v]
        _, k, offset, v = m
    elif len(m) == 3 and isinstance(m[2], list):
        if len(m[2]) != 2:
            raise HistoryError(f"expected [offset, value], got {show(m[2])}", field=field)
        k, (offset, v) = m[1], m[2]
    elif len(m) == 3:
        _, k, v = m
        offset = None
    else:
        raise HistoryError(f'expected ["send", key, value], got {show(m)}', field=field)
    offset = _int(offset, field, optional=True)
    return ("send", key(k, field), _message_value(v, field), offset)


def _commit(m: list, field: str) -> tuple:
    if len(m) != 3:
        raise HistoryError(f'expected ["commit", key, offset], got {show(m)}', field=field)
    return ("commit", key(m[1], field), _int(m[2], field))


def _poll(m: list, field: str, typing: KeyTyping | None) -> tuple:
    if len(m) == 1 or (len(m) == 2 and m[1] is None):
        return ("poll", None)
    if len(m) != 2:
        raise HistoryError(f'expected ["poll"] or ["poll", reads], got {show(m)}', field=field)
    reads: dict[Key, list[tuple[int, int | str]]] = {}
    for k, records in _poll_items(m[1], field, typing):
        k = key(k, field)
        if k in reads:
            raise HistoryError(f"key {show(k)} appears twice in one poll", field=field)
        reads[k] = _records(records, field)
    return ("poll", reads)


def _poll_items(body: Any, field: str, typing: KeyTyping | None) -> Iterator[tuple[Any, Any]]:
    if isinstance(body, dict):
        for k, records in body.items():
            yield (typing.read(k) if typing is not None and isinstance(k, str) else k), records
    elif isinstance(body, list):  # kmon's typed form: [[k, records], ...]
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise HistoryError(f"expected [key, records], got {show(pair)}", field=field)
            yield pair[0], pair[1]
    else:
        raise HistoryError(f"expected a map of key to records, got {show(body)}", field=field)


def _records(records: Any, field: str) -> list[tuple[int, int | str]]:
    if not isinstance(records, list):
        raise HistoryError(f"expected a list of [offset, value], got {show(records)}", field=field)
    out = []
    for r in records:
        if not isinstance(r, list) or len(r) != 2:
            raise HistoryError(f"expected [offset, value], got {show(r)}", field=field)
        out.append((_int(r[0], field), _message_value(r[1], field)))
    return out


def _rebalance_log(log: Any) -> tuple[Rebalance, ...]:
    return tuple(_rebalances(log, "rebalance-log"))


def _rebalances(x: Any, field: str) -> Iterator[Rebalance]:
    # Lenient on purpose: Jepsen's shape changed across versions; the checker only needs keys.
    if x is None:
        return
    if isinstance(x, dict):
        if "keys" in x:
            kind = x.get("type", x.get("kind"))
            keys = _list(x["keys"], field, "a list of keys")
            yield Rebalance(
                kind if isinstance(kind, str) else "", tuple(key(k, field) for k in keys)
            )
        else:
            for v in x.values():
                yield from _rebalances(v, field)
    elif isinstance(x, list) and all(type(k) in (int, str) for k in x):
        if x:
            yield Rebalance("", tuple(x))
    elif isinstance(x, list):
        for item in x:
            yield from _rebalances(item, field)
    else:
        raise HistoryError(f"expected a list of rebalance events, got {show(x)}", field=field)


def _meta(raw: Mapping[str, Any]) -> OpMeta | None:
    present = {name: _get(raw, name, _MISSING) for name in META_FIELDS}
    if all(v is _MISSING for v in present.values()):
        return None
    p = {name: (None if v is _MISSING else v) for name, v in present.items()}
    error, seek = p["error"], p["seek-to-beginning?"]
    deliberate = p["deliberate-abort"]
    if deliberate is None:
        deliberate = _jepsen_intentional_abort(error)
    return OpMeta(
        probe=_str("" if p["probe"] is None else p["probe"], "probe"),
        transactional_id=_str(p["transactional-id"], "transactional-id", optional=True),
        txn_seq=_int(p["txn-seq"], "txn-seq", optional=True),
        deliberate_abort=_bool(deliberate, "deliberate-abort"),
        error=error if error is None or isinstance(error, str) else compact_json(error),
        seek_to_beginning=False if seek is None else _bool(seek, "seek-to-beginning?"),
        placements=_placements(p["placements"]),
        group=_str(p["group"], "group", optional=True),
        starts=_starts(p["starts"]),
        invoke_time=_int(p["invoke-time"], "invoke-time", optional=True),
    )


def _jepsen_intentional_abort(error: Any) -> bool:
    body = error.get("body-error") if isinstance(error, dict) else None
    return isinstance(body, dict) and body.get("type") == "intentional-abort"


def _str(x: Any, field: str, *, optional: bool = False) -> Any:
    if isinstance(x, str) or (x is None and optional):
        return x
    raise HistoryError(f"expected a string, got {show(x)}", field=field)


def _bool(x: Any, field: str) -> bool:
    if isinstance(x, bool):
        return x
    raise HistoryError(f"expected true or false, got {show(x)}", field=field)


def _keyed(x: Any, name: str, what: str, twice: str) -> Iterator[tuple[str, Key, dict]]:
    """(field, key, object) of each object of the list ``x`` (meta ``name``), one per key."""
    seen: set[Key] = set()
    for i, obj in enumerate(_list(x, name, f"a list of {what}")):
        field = f"{name}[{i}]"
        if not isinstance(obj, dict):
            raise HistoryError(f"expected an object, got {show(obj)}", field=field)
        k = key(obj.get("key"), f"{field}.key")
        if k in seen:
            raise HistoryError(f"key {show(k)} {twice} twice", field=field)
        seen.add(k)
        yield field, k, obj


def _placements(x: Any) -> dict[Key, KeyPlacement]:
    return {k: KeyPlacement(
        topic=_str(p.get("topic"), f"{field}.topic"),
        partition=_int(p.get("partition"), f"{field}.partition", minimum=0),
        leader=_int(p.get("leader"), f"{field}.leader", optional=True),
        leader_epoch=_int(
            p.get("leader-epoch", p.get("leader_epoch")), f"{field}.leader-epoch", optional=True
        ),
    ) for field, k, p in _keyed(x, "placements", "placements", "placed")}


def _starts(x: Any) -> dict[Key, Start]:
    return {k: Start(offset=_int(s.get("offset"), f"{field}.offset", optional=True),
                     source=_str(s.get("source"), f"{field}.source"))
            for field, k, s in _keyed(x, "starts", "starts", "started")}


def _note_typed_keys(
    raw: Mapping[str, Any],
    f: str,
    rebalance_log: tuple[Rebalance, ...],
    meta: OpMeta | None,
    typing: KeyTyping,
) -> None:
    """Record this op's keys whose JSON type is exact, before its poll maps are read."""
    value = raw.get("value")
    if isinstance(value, list) and f in MOP_LIST_FS:
        typing.note(
            m[1]
            for m in value
            if isinstance(m, list)
            and m  # an empty mop is rejected when the op's value is read
            and len(m) >= (2 if m[0] == "share-read" else 3)
            and m[0] in _TYPED_MOPS
            and type(m[1]) in (int, str)
        )
    elif isinstance(value, list) and f in KEY_LIST_FS:
        typing.note(k for k in value if type(k) in (int, str))
    for r in rebalance_log:
        typing.note(r.keys)
    if meta is not None:
        typing.note(meta.placements)
        typing.note(meta.starts)


# ---------------------------------------------------------------------------------------------
# Writing


def op_to_wire(op: Op, typing: KeyTyping | None = None) -> dict[str, Any]:
    """``op`` as a JSON-ready dict in the wire shapes above.

    ``typing`` holds the keys a loader will have seen before this op (``JsonlWriter`` keeps it);
    it is updated with this op's typed keys. ``None`` assumes a history of this op alone.
    """
    typing = typing if typing is not None else KeyTyping()
    typing.note(typed_keys(op))
    out: dict[str, Any] = {
        "index": op.index,
        "time": op.time,
        "type": op.type,
        "process": op.process,
        "f": op.f,
        "value": _value_to_wire(op, typing),
    }
    if op.rebalance_log:
        out["rebalance-log"] = [{"type": r.kind, "keys": list(r.keys)} for r in op.rebalance_log]
    if op.meta is not None:
        out.update(_meta_to_wire(op.meta))
    return out


def typed_keys(op: Op) -> Iterator[Key]:
    """The keys of ``op`` in positions where JSON keeps their type (see the key-typing rule)."""
    if op.f in MOP_LIST_FS and op.value:
        yield from (m[1] for m in op.value if m[0] in _TYPED_MOPS)
    elif op.f in KEY_LIST_FS and op.value:
        yield from op.value
    for r in op.rebalance_log:
        yield from r.keys
    if op.meta is not None:
        yield from op.meta.placements
        yield from op.meta.starts


def _value_to_wire(op: Op, typing: KeyTyping) -> Any:
    if op.f in MOP_LIST_FS:
        return [_mop_to_wire(m, op.type, typing) for m in op.value or ()]
    if op.f in KEY_LIST_FS:
        return list(op.value or ())
    return jsonable(op.value)


def _mop_to_wire(m: tuple, type_: str, typing: KeyTyping) -> list:
    if m[0] == "send":
        _, k, v, offset = m
        if type_ == "invoke" and offset is None:
            return ["send", k, v]
        return ["send", k, [offset, v]]
    if m[0] == "commit":
        return ["commit", m[1], m[2]]
    if m[0] == "share-read":
        if m[2] is None:
            return ["share-read", m[1]]
        return ["share-read", m[1], [[o, v, c] for o, v, c in m[2]]]
    if m[0] == "ack":
        return ["ack", m[1], m[2], m[3]]
    reads = m[1]
    if reads is None:
        return ["poll"]
    records = {k: [[o, v] for o, v in pairs] for k, pairs in reads.items()}
    if all(_reads_back(k, typing) for k in records):
        return ["poll", {str(k): r for k, r in records.items()}]
    return ["poll", [[k, r] for k, r in records.items()]]


def _reads_back(k: Key, typing: KeyTyping) -> bool:
    back = typing.read(str(k))
    return type(back) is type(k) and back == k


def _meta_to_wire(meta: OpMeta) -> dict[str, Any]:
    out: dict[str, Any] = {"probe": meta.probe}
    if meta.transactional_id is not None:
        out["transactional-id"] = meta.transactional_id
    if meta.txn_seq is not None:
        out["txn-seq"] = meta.txn_seq
    if meta.deliberate_abort:
        out["deliberate-abort"] = True
    if meta.error is not None:
        out["error"] = meta.error
    if meta.seek_to_beginning:
        out["seek-to-beginning?"] = True
    if meta.invoke_time is not None:
        out["invoke-time"] = meta.invoke_time
    if meta.group is not None:
        out["group"] = meta.group
    if meta.starts:
        out["starts"] = [
            {"key": k, "offset": s.offset, "source": s.source} for k, s in meta.starts.items()
        ]
    if meta.placements:
        out["placements"] = [
            {
                "key": k,
                "topic": p.topic,
                "partition": p.partition,
                "leader": p.leader,
                "leader-epoch": p.leader_epoch,
            }
            for k, p in meta.placements.items()
        ]
    return out


# ---------------------------------------------------------------------------------------------
# Small shared helpers


def jsonable(x: Any) -> Any:
    """A JSON-ready copy of a free-form value (nemesis values: sets, tuples, non-string keys)."""
    if isinstance(x, Mapping):
        return {_json_key(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set | frozenset):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, str | int | float):
        return x
    return str(x)


def _json_key(k: Any) -> str | int | float | bool | None:
    return k if k is None or isinstance(k, str | int | float) else compact_json(k)


def compact_json(x: Any) -> str:
    return json.dumps(jsonable(x), separators=(",", ":"), ensure_ascii=False)


def show(x: Any, limit: int = 80) -> str:
    """A short rendering of an offending input value for error messages."""
    try:
        text = compact_json(x)
    except (TypeError, ValueError, RecursionError):
        text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OpReader:
    """Reads one file's raw ops in order: fills missing indices, checks they increase, and keeps
    the key-typing state for JSON input."""

    def __init__(self, *, json_keys: bool) -> None:
        self.typing = KeyTyping() if json_keys else None
        self.last_index: int | None = None

    def read(self, raw: Any, line: int) -> Op:
        """The op of file line ``line``; a HistoryError names the line and field."""
        dense = 0 if self.last_index is None else self.last_index + 1
        try:
            op = op_from_wire(raw, index=dense, typing=self.typing)
        except HistoryError as e:
            raise e.at(line=line) from None
        if self.last_index is not None and op.index <= self.last_index:
            raise HistoryError(
                f"expected an index above the previous op's {self.last_index}, got {op.index}",
                field="index",
                line=line,
            )
        self.last_index = op.index
        return op
