"""Op event bytes straight to fragments: the monitor's hot path (compiled: ``kmon/_build.py``).

``kmon.history.avro`` (fastavro) is the reference codec: it builds a dict per record, then an
``Op``, at a few tens of thousands of events per second per core. The monitor reads every op
event the probes emit, so here the binary form of schema versions 1 and 2 (Avro's: zig-zag
varints, length-prefixed UTF-8 strings, arrays in counted blocks, a union as its branch index
then the value) is read by hand into just what the fold needs, and the op is split into
per-key fragments by ``fragment.split_fields``, the one definition of splitting (with the op's
consumer group and starts; an offset commit's invocation too, as ``kmon check`` splits it). v2
appended fields and enum symbols to v1 (the ``commit`` op and micro-op, ``group``, ``starts``),
and v3 to v2 (the share group's ops and micro-ops, and two trailing ``Mop`` fields: ``share``,
``outcome``), so one reader reads all three, older events stopping before the newer fields.
Events of any other packaged version go through the reference codec (``decode_with_codec``).

The contract the monitor holds events to is checked here too: an event that breaks it gets a
dead-letter *reason* (``REASONS``) instead of fragments. The tests hold this reader to
``kmon.history.avro.decode_op`` on generated, truncated and corrupted events.
"""

from __future__ import annotations

from typing import Any, Final, final

from kmon.history import avro
from kmon.history.fragment import Fragment, note_leaders, split_fields, split_invoke
from kmon.history.model import Op, Rebalance, Start

# Dead-letter reasons: the ``reason`` label of ``kmon_dead_letters_total``.
NO_HEADER: Final = "no-schema-header"
UNKNOWN_VERSION: Final = "unknown-schema-version"
UNDECODABLE: Final = "undecodable"
VERSION_MISMATCH: Final = "schema-version-mismatch"
NEGATIVE_INDEX: Final = "negative-index"
NEGATIVE_TIME: Final = "negative-time"
SEND_WITHOUT_VALUE: Final = "send-without-key-or-value"
COMMIT_WITHOUT_OFFSET: Final = "commit-without-key-or-offset"
SHARE_MOP_INCOMPLETE: Final = "share-mop-without-key-offset-or-outcome"
NEGATIVE_OFFSET: Final = "negative-offset"
TIME_IN_FUTURE: Final = "time-in-future"
FOLD_ERROR: Final = "fold-error"  # raised by the fold, not here: a bug or an unforeseen shape
REASONS: Final = (NO_HEADER, UNKNOWN_VERSION, UNDECODABLE, VERSION_MISMATCH, NEGATIVE_INDEX,
                  NEGATIVE_TIME, SEND_WITHOUT_VALUE, COMMIT_WITHOUT_OFFSET, SHARE_MOP_INCOMPLETE,
                  NEGATIVE_OFFSET, TIME_IN_FUTURE, FOLD_ERROR)

# The schema's enums, by symbol index (op_event_v3.avsc; v2 has all but the last two OpF and
# MopF symbols and the AckOutcome enum; v1 all but the last three OpF and MopF symbols).
_OP_TYPES: Final = ("invoke", "ok", "fail", "info")
_OP_FS: Final = ("send", "poll", "txn", "assign", "subscribe", "crash", "unknown", "commit",
                 "share-poll", "ack")
_N_OP_FS: Final = (0, 7, 8, 10)  # OpF symbols per version
_N_MOP_FS: Final = (0, 2, 3, 5)  # MopF symbols per version
_MOP_SEND: Final = 0
_MOP_POLL: Final = 1
_MOP_COMMIT: Final = 2
_MOP_SHARE_READ: Final = 3
_MOP_ACK: Final = 4
_ACK_OUTCOMES: Final = ("accept", "release", "reject")
_MOP_LIST_FS: Final = frozenset(("send", "poll", "txn", "commit", "share-poll", "ack"))
_V1: Final = 1  # the versions read by hand: v1, v2 = v1 + trailing fields and symbols,
_V2: Final = 2  # and v3 = v2 + trailing symbols and Mop fields
_V3: Final = 3
_MAX_LONG: Final = 2**63 - 1
_MIN_LONG: Final = -(2**63)


class EventError(ValueError):
    """An event the monitor cannot fold: ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class _Undecodable(Exception):
    """The bytes are not an op event of the version read (truncated, bad union branch...)."""


@final
class _Reader:
    """A cursor over one event's bytes, reading Avro's binary primitives."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def long(self) -> int:
        """A zig-zag varint; at most 10 bytes, within 64 bits (Avro's long)."""
        buf = self.buf
        pos = self.pos
        if pos >= self.end:
            raise _Undecodable("truncated")
        b = buf[pos]
        pos += 1
        if b < 0x80:  # one byte: most lengths, counts, branches and small values
            self.pos = pos
            return (b >> 1) ^ -(b & 1)
        n = b & 0x7F
        shift = 7
        while b & 0x80:
            if pos >= self.end or shift > 63:
                raise _Undecodable("truncated or overlong varint")
            b = buf[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
        self.pos = pos
        v = (n >> 1) ^ -(n & 1)
        if v > _MAX_LONG or v < _MIN_LONG:
            raise _Undecodable("varint beyond 64 bits")
        return v

    def string(self) -> str:
        n = self.long()
        start = self.pos
        if n < 0 or start + n > self.end:
            raise _Undecodable("bad string length")
        self.pos = start + n
        try:
            return self.buf[start:start + n].decode("utf-8")
        except UnicodeDecodeError:
            raise _Undecodable("string is not UTF-8") from None

    def skip_string(self) -> None:
        """A string the fold does not need, still checked: an event is valid as a whole."""
        self.string()

    def skip_boolean(self) -> None:
        if self.pos >= self.end:
            raise _Undecodable("truncated")
        self.pos += 1

    def branch(self, n: int) -> int:
        """A union's branch index (or an enum's symbol index), below ``n``."""
        b = self.long()
        if b < 0 or b >= n:
            raise _Undecodable("union branch or enum symbol out of range")
        return b

    def count(self) -> int:
        """The item count of an array's next block (0: the array ends)."""
        n = self.long()
        if n < 0:  # a negative count is followed by the block's size in bytes
            self.long()
            return -n
        return n

    def long_or_string(self) -> Any:
        return self.long() if self.branch(2) == 0 else self.string()

    def null_long_or_string(self) -> Any:
        b = self.branch(3)
        if b == 0:
            return None
        return self.long() if b == 1 else self.string()

    def null_or_long(self) -> Any:
        return None if self.branch(2) == 0 else self.long()

    def null_or_int(self) -> None:
        if self.branch(2) == 1:
            self.long()

    def null_or_string(self) -> None:
        if self.branch(2) == 1:
            self.skip_string()

    def opt_string(self) -> str | None:
        return self.string() if self.branch(2) == 1 else None

    def keys(self) -> list[Any]:
        out: list[Any] = []
        n = self.count()
        while n:
            for _ in range(n):
                out.append(self.long_or_string())
            n = self.count()
        return out


@final
class Placement:
    """Where one key of an op event lives and which broker led it, as the probe's client
    metadata showed when the op ran: ``leader`` None when the event does not say. ``op`` is
    the event's op index (a probe's indices increase), so that the latest of several
    placements of a key can be told apart whatever order events arrive in."""

    def __init__(self, key: Any, topic: str, partition: int, leader: int | None,
                 op: int) -> None:
        self.key = key
        self.topic = topic
        self.partition = partition
        self.leader = leader
        self.op = op

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Placement):
            return NotImplemented
        return (self.key == other.key and self.topic == other.topic
                and self.partition == other.partition and self.leader == other.leader
                and self.op == other.op)

    def __repr__(self) -> str:
        return (f"Placement({self.key!r}, {self.topic!r}, {self.partition}, {self.leader}, "
                f"{self.op})")


@final
class Event:
    """What the monitor needs of one valid op event: its identity, clock and fragments, where
    its keys live (``Placement`` each), and the consumer group and partition starts of its
    commits and assignments (``OpMeta.group``, ``OpMeta.starts``; None and {} before v2)."""

    def __init__(self, probe: str, index: int, time: int, frags: list[Fragment],
                 placements: list[Placement], group: str | None = None,
                 starts: dict[Any, Start] | None = None) -> None:
        self.probe = probe
        self.index = index
        self.time = time
        self.frags = frags
        self.placements = placements
        self.group = group
        self.starts: dict[Any, Start] = {} if starts is None else starts


@final
class _Flags:
    """Contract breaches noticed while reading, judged once the whole event has decoded (an
    undecodable event is undecodable, whatever its first fields said)."""

    def __init__(self) -> None:
        self.send_without_value = False
        self.commit_without_offset = False
        self.share_mop_incomplete = False
        self.negative_offset = False


def _reads(r: _Reader, flags: _Flags) -> dict[Any, list[tuple[int, Any]]]:
    """A poll mop's reads: key -> [(offset, value), ...] (a key named twice: the last wins, as
    in the reference codec)."""
    by_key: dict[Any, list[tuple[int, Any]]] = {}
    n = r.count()
    while n:
        for _ in range(n):
            key = r.long_or_string()
            pairs: list[tuple[int, Any]] = []
            m = r.count()
            while m:
                for _ in range(m):
                    off = r.long()
                    if off < 0:
                        flags.negative_offset = True
                    pairs.append((off, r.long_or_string()))
                m = r.count()
            by_key[key] = pairs
        n = r.count()
    return by_key


def _share(r: _Reader, flags: _Flags) -> list[tuple[int, Any, int]]:
    """v3's share records: [(offset, value, delivery count), ...]."""
    out: list[tuple[int, Any, int]] = []
    n = r.count()
    while n:
        for _ in range(n):
            off = r.long()
            if off < 0:
                flags.negative_offset = True
            value = r.long_or_string()
            out.append((off, value, r.long()))
        n = r.count()
    return out


def _mops(r: _Reader, flags: _Flags, version: int) -> list[tuple]:
    """The mops array of an event of schema ``version`` (v1: send, poll; v2: commit too; v3:
    share-read and ack too, and the trailing share and outcome fields)."""
    out: list[tuple] = []
    n_kinds = _N_MOP_FS[version]
    n = r.count()
    while n:
        for _ in range(n):
            f = r.branch(n_kinds)
            key = r.null_long_or_string()
            value = r.null_long_or_string()
            offset = r.null_or_long()
            reads: dict[Any, list[tuple[int, Any]]] | None = None
            if r.branch(2) == 1:
                reads = _reads(r, flags)
            share: list[tuple[int, Any, int]] | None = None
            outcome: str | None = None
            if version >= _V3:
                if r.branch(2) == 1:
                    share = _share(r, flags)
                if r.branch(2) == 1:
                    outcome = _ACK_OUTCOMES[r.branch(3)]
            if offset is not None and offset < 0:
                flags.negative_offset = True
            if f == _MOP_SEND:
                if key is None or value is None:
                    flags.send_without_value = True
                out.append(("send", key, value, offset))
            elif f == _MOP_COMMIT:
                if key is None or offset is None:
                    flags.commit_without_offset = True
                out.append(("commit", key, offset))
            elif f == _MOP_SHARE_READ:
                if key is None:
                    flags.share_mop_incomplete = True
                out.append(("share-read", key, share))
            elif f == _MOP_ACK:
                if key is None or offset is None or outcome is None:
                    flags.share_mop_incomplete = True
                out.append(("ack", key, offset, outcome))
            else:
                out.append(("poll", reads))
        n = r.count()
    return out


def _starts(r: _Reader, flags: _Flags) -> dict[Any, Start]:
    """v2's starts: key -> Start (a key named twice: the last wins, as in the reference codec)."""
    out: dict[Any, Start] = {}
    n = r.count()
    while n:
        for _ in range(n):
            key = r.long_or_string()
            offset = r.null_or_long()
            if offset is not None and offset < 0:
                flags.negative_offset = True
            out[key] = Start(offset, r.string())
        n = r.count()
    return out


def _rebalances(r: _Reader) -> list[Rebalance]:
    out: list[Rebalance] = []
    n = r.count()
    while n:
        for _ in range(n):
            kind = r.string()
            out.append(Rebalance(kind, tuple(r.keys())))
        n = r.count()
    return out


def _placements(r: _Reader, op: int) -> list[Placement]:
    out: list[Placement] = []
    n = r.count()
    while n:
        for _ in range(n):
            key = r.long_or_string()
            topic = r.string()
            partition = r.long()
            leader = r.null_or_long()  # an Avro int is read as a long
            r.null_or_int()  # leader epoch
            out.append(Placement(key, topic, partition, leader, op))
        n = r.count()
    return out


def read_event(data: bytes, version: int) -> Event:
    """The event in ``data``, written with schema ``version`` (its header's); EventError with
    the reason when it breaks the contract."""
    if version != _V3 and version != _V2 and version != _V1:
        return decode_with_codec(data, version)
    v2 = version >= _V2
    r = _Reader(data)
    flags = _Flags()
    try:
        schema_version = r.long()
        probe = r.string()
        index = r.long()
        time = r.long()
        invoke_time = r.null_or_long()
        process = r.long()
        ty = _OP_TYPES[r.branch(4)]
        f = _OP_FS[r.branch(_N_OP_FS[version])]
        mops = _mops(r, flags, version)
        keys = r.keys()
        r.skip_boolean()  # seek_to_beginning
        rebalances = _rebalances(r)
        r.null_or_string()  # transactional_id
        r.null_or_long()  # txn_seq
        r.skip_boolean()  # deliberate_abort
        r.null_or_string()  # error
        placements = _placements(r, index)
        group = r.opt_string() if v2 else None
        starts = _starts(r, flags) if v2 else {}
    except _Undecodable as e:
        raise EventError(UNDECODABLE, str(e)) from None
    if r.pos != r.end:
        raise EventError(UNDECODABLE, "trailing bytes after the event")
    if schema_version != version:
        raise EventError(VERSION_MISMATCH, f"event says {schema_version}, header {version}")
    _judge(index, time, flags)
    if ty == "invoke":
        return Event(probe, index, time, split_invoke(index, process, f, time, mops, group),
                     placements, group, starts)
    it = time if invoke_time is None else invoke_time
    value: Any = mops if f in _MOP_LIST_FS else keys if f in ("assign", "subscribe") else None
    frags = split_fields(index, process, ty, f, time, value, rebalances, it, group, starts)
    if f == "share-poll" and group is not None and placements:
        note_leaders(frags, {pl.key: pl.leader for pl in placements})
    return Event(probe, index, time, frags, placements, group, starts)


def _judge(index: int, time: int, flags: _Flags) -> None:
    if index < 0:
        raise EventError(NEGATIVE_INDEX, str(index))
    if time < 0:
        raise EventError(NEGATIVE_TIME, str(time))
    if flags.send_without_value:
        raise EventError(SEND_WITHOUT_VALUE)
    if flags.commit_without_offset:
        raise EventError(COMMIT_WITHOUT_OFFSET)
    if flags.share_mop_incomplete:
        raise EventError(SHARE_MOP_INCOMPLETE)
    if flags.negative_offset:
        raise EventError(NEGATIVE_OFFSET)


def decode_with_codec(data: bytes, version: int) -> Event:
    """``read_event`` through the reference codec: for events of older schema versions."""
    try:
        record = avro.decode_record(data, version)
    except avro.DecodeError as e:
        reason = VERSION_MISMATCH if "header says" in str(e) else UNDECODABLE
        raise EventError(reason, str(e)) from None
    flags = _Flags()
    for m in record["mops"]:
        if m["f"] == "send" and (m["key"] is None or m["value"] is None):
            flags.send_without_value = True
        if m["f"] == "commit" and (m["key"] is None or m["offset"] is None):
            flags.commit_without_offset = True
        if (m["f"] == "share_read" and m["key"] is None) or (m["f"] == "ack" and (
                m["key"] is None or m["offset"] is None or m["outcome"] is None)):
            flags.share_mop_incomplete = True
        if any(x["offset"] < 0 for x in m.get("share") or ()):
            flags.negative_offset = True
        if (m["offset"] is not None and m["offset"] < 0) or any(
                x["offset"] < 0 for r in m["reads"] or () for x in r["records"]):
            flags.negative_offset = True
    if any(s["offset"] is not None and s["offset"] < 0 for s in record["starts"]):
        flags.negative_offset = True
    _judge(record["index"], record["time"], flags)
    return event_of(avro.record_to_op(record))


def event_of(op: Op) -> Event:
    """The ``Event`` of a decoded, valid ``op``."""
    meta = op.meta
    probe = meta.probe if meta is not None else ""
    placements = [Placement(k, p.topic, p.partition, p.leader, op.index)
                  for k, p in meta.placements.items()] if meta else []
    group = meta.group if meta is not None else None
    starts = dict(meta.starts) if meta is not None else {}
    if op.type == "invoke":
        return Event(probe, op.index, op.time, split_invoke(
            op.index, op.process, op.f, op.time, op.value or [], group), placements, group,
            starts)
    it = op.time if meta is None or meta.invoke_time is None else meta.invoke_time
    frags = split_fields(op.index, op.process, op.type, op.f, op.time, op.value,
                         op.rebalance_log, it, group, starts)
    if op.f == "share-poll" and group is not None and placements:
        note_leaders(frags, {pl.key: pl.leader for pl in placements})
    return Event(probe, op.index, op.time, frags, placements, group, starts)


@final
class Split:
    """One batch of events (an Arrow batch, in the monitor) split by (probe, key): each key's
    fragments in event order and its latest placement (that of the highest op index), the
    rows that are dead letters with their reasons, and the latest time of a valid event (ns;
    -1: none)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, Any], list[Fragment]] = {}
        self.placements: dict[tuple[str, Any], Placement] = {}
        self.dead: list[tuple[int, str]] = []
        self.max_time = -1


_versions: dict[str, int] = {}  # header value -> schema version (only valid ones are kept)


def header_version(header: str | None) -> int:
    """The schema version a ``kmon-schema`` header value names; EventError unless packaged."""
    if header is None:
        raise EventError(NO_HEADER)
    v = _versions.get(header)
    if v is None:
        try:
            v = avro.version_from_header(header)
        except avro.DecodeError as e:
            raise EventError(UNKNOWN_VERSION, str(e)) from None
        _versions[header] = v
    return v


def split_batch(values: list[bytes | None], headers: list[str | None], kafka_ms: list[int],
                max_skew_ns: int | None) -> Split:
    """Read and split a batch of Kafka records' values; ``headers`` are their ``kmon-schema``
    header values (or None), ``kafka_ms`` their Kafka timestamps: an event more than
    ``max_skew_ns`` ahead of its record's is a dead letter (it would drag the watermark into
    the future and force pending verdicts early)."""
    out = Split()
    groups, placements = out.groups, out.placements
    for i in range(len(values)):
        data = values[i]
        try:
            version = header_version(headers[i])
            if data is None:
                raise EventError(UNDECODABLE, "no value")
            ev = read_event(data, version)
            if max_skew_ns is not None and ev.time > kafka_ms[i] * 1_000_000 + max_skew_ns:
                raise EventError(TIME_IN_FUTURE, f"{ev.time} ns vs Kafka's {kafka_ms[i]} ms")
        except EventError as e:
            out.dead.append((i, e.reason))
            continue
        if ev.time > out.max_time:
            out.max_time = ev.time
        probe = ev.probe
        for fr in ev.frags:
            gk = (probe, fr.key)
            frags = groups.get(gk)
            if frags is None:
                groups[gk] = [fr]
            else:
                frags.append(fr)
        for pl in ev.placements:
            pk = (probe, pl.key)
            had = placements.get(pk)
            if had is None or had.op <= pl.op:
                placements[pk] = pl
    return out
