"""An investigation as text for the terminal, and as JSON for the incident record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kmon.history.model import MOP_FS, Op
from kmon.history.wire import jsonable, op_to_wire
from kmon.investigate.story import ShareDelivery, leader_of, same_key

if TYPE_CHECKING:
    from kmon.investigate import Investigation

CROSS_KEY = {"torn-transaction", "G0", "G1c"}


def when(t: int, t0: int) -> str:
    """Epoch nanoseconds as UTC wall time; small (synthetic) times relative to the first op."""
    if t > 10**17:
        import datetime as dt

        stamp = dt.datetime.fromtimestamp(t / 1e9, dt.UTC)
        return stamp.strftime("%H:%M:%S.") + f"{t % 10**9 // 10**6:03d}"
    return f"+{(t - t0) / 1e9:.6f}s"


def _group(op: Op) -> str:
    return f"group {op.meta.group}" if op.meta is not None and op.meta.group else "its group"


def _share_did(op: Op, key: Any) -> str:
    """A share poll's deliveries (offset, value and delivery count each) or an ack op's
    per-record outcomes, for the op's share group; a poll's placement leader, when known."""
    group = op.meta.group if op.meta is not None and op.meta.group else "?"
    parts = []
    for m in op.value or ():
        if not same_key(m[1], key):
            continue
        if m[0] == "share-read":
            if m[2] is None:
                parts.append("share-polled, records unknown" if op.type != "invoke"
                             else "share-poll")
            elif not m[2]:
                parts.append("share-polled, got nothing")
            else:
                parts.append("delivered " + ", ".join(f"{o} ({v}, count {c})"
                                                      for o, v, c in m[2]))
        elif m[0] == "ack":
            parts.append(f"{m[2]} {str(m[3]).upper()}")
    if op.f == "ack" and parts:
        parts = ["acknowledged " + ", ".join(parts)]
    text = f"share group {group}: " + "; ".join(parts or ["-"])
    leader = leader_of(op, key) if op.f == "share-poll" else None
    return text + (f"; leader {leader}" if leader is not None else "")


def did(op: Op, key: Any) -> str:
    """What the (trimmed) op did to the key, in words."""
    if op.f in ("share-poll", "ack"):
        return _share_did(op, key)
    parts = []
    for m in op.value or () if op.f in MOP_FS or op.f == "commit" else ():
        if m[0] == "send":
            where = f"at {m[3]}" if m[3] is not None else "(offset unknown)"
            parts.append(f"wrote {m[2]} {where}")
        elif m[0] == "commit":
            if same_key(m[1], key):
                parts.append(f"committed offset {m[2]} for {_group(op)}")
        elif m[1] is not None:
            for pairs in m[1].values():
                if not pairs:
                    parts.append("polled, got nothing")
                else:
                    offs = [o for o, _ in pairs]
                    span = f"{offs[0]}" if len(offs) == 1 else f"{offs[0]}..{offs[-1]}"
                    parts.append(f"read {span} {[v for _, v in pairs]}")
    if op.f in ("assign", "subscribe"):
        parts.append(f"{op.f} {list(op.value or ())}")
    if op.f == "crash":
        parts.append("crashed: its clients were torn down")
    for r in op.rebalance_log:
        parts.append(f"rebalance: {r.kind} {list(r.keys)}")
    return "; ".join(parts) or "-"


def op_name(inv: Investigation, index: Any, ops_by_index: dict[int, Op]) -> str:
    if not isinstance(index, int):
        return f"op {index}"
    op = ops_by_index.get(index)
    if op is None:
        return f"op {inv.label(index)}"
    return f"op {inv.label(index)} (process {op.process}, {op.type} {op.f})"


def explain(kind: str, r: dict[str, Any], inv: Investigation) -> str:
    """One anomaly record in a sentence."""
    ops = {o.index: o for o in inv.key_ops}

    def name(i: Any) -> str:
        return op_name(inv, i, ops)

    offs, vals = r.get("offsets") or [None, None], r.get("values") or [None, None]
    if kind == "lost-write":
        text = f"value {r.get('value')} was acknowledged at offset {r.get('offset')} by " \
               f"{name(r.get('writer'))} and no poll ever returned it"
        if r.get("reader") is not None:
            text += f", although {name(r['reader'])} read past it"
        if r.get("max-read-offset") is not None:
            text += f" (polls reached offset {r['max-read-offset']})"
        return text
    if kind == "G1a":
        return f"{name(r.get('reader'))} read value {r.get('value')} at offset " \
               f"{r.get('offset')}, written by {name(r.get('writer'))}, which failed or aborted"
    if kind == "duplicate":
        return f"value {r.get('value')} is at offsets {r.get('offsets')}"
    if kind == "inconsistent-offsets":
        return f"offset {r.get('offset')} holds values {r.get('values')}"
    if kind in ("poll-skip", "nonmonotonic-poll", "nonmonotonic-send"):
        a, b = (r.get("ops") or [None, None])[:2]
        verb = "wrote" if kind == "nonmonotonic-send" else "read"
        text = f"process {r.get('process')}: {name(a)} {verb} up to offset {offs[0]} " \
               f"({vals[0]}), then {name(b)} {verb} from offset {offs[1]} ({vals[1]})"
        if r.get("skipped"):
            text += f", skipping {r['skipped']}"
        elif kind != "poll-skip":
            text += ": backwards"
        return text
    if kind.startswith("int-"):
        verb = "wrote" if kind.endswith("send") else "read"
        text = f"within {name(r.get('op'))}: {verb} offset {offs[0]} ({vals[0]}) then " \
               f"{offs[1]} ({vals[1]})"
        return text + (f", skipping {r['skipped']}" if r.get("skipped") else ": backwards")
    if kind == "precommitted-read":
        return f"{name(r.get('op'))} read its own writes {r.get('values')} before committing"
    if kind == "torn-transaction":
        return f"{name(r.get('writer'))} wrote {r.get('visible')} (seen) and " \
               f"{r.get('invisible')} (provably never seen): not atomic"
    if kind in ("G0", "G1c"):
        steps = ", ".join(f"{s['type']} on {s['key']} ({s['value']})" for s in r.get("steps", []))
        return f"ops {[inv.label(i) for i in r.get('cycle', [])]} form a cycle: {steps}"
    if kind.startswith("share-"):
        return _explain_share(kind, r, name)
    return ", ".join(f"{k}={v}" for k, v in r.items())


def _explain_share(kind: str, r: dict[str, Any], name: Any) -> str:
    """A share group's anomaly record (``kmon.checker.share``) in a sentence."""
    group, off, value = r.get("group"), r.get("offset"), r.get("value")
    a, b = ((r.get("ops") or []) + [None, None])[:2]
    rec = f"offset {off} ({value})"
    if kind == "share-lost":
        return (f"share group {group} was never delivered {rec}, acknowledged to "
                f"{name(r.get('writer'))}, although it was delivered records below and above "
                f"it (passed at {r.get('passed-at')})")
    if kind == "share-double-accept":
        return (f"{name(a)} and {name(b)} were both delivered {rec} by share group {group}, "
                "and both ACCEPTs succeeded")
    if kind == "share-redelivered":
        return (f"{name(a)} was delivered {rec} by share group {group} and acknowledged it "
                f"{str(r.get('outcome')).upper()} (ok); {name(b)} was delivered it again")
    if kind == "share-concurrent-delivery":
        return (f"{name(a)} and {name(b)} were both delivered {rec} by share group {group} "
                f"within one {r.get('lock-ms')} ms lock, neither acknowledging it first")
    if kind == "share-delivery-count" and "counts" in r:
        first, then = r["counts"]
        return (f"share group {group} delivered {rec} to {name(a)} with count {first}, then "
                f"to {name(b)} with count {then}, no higher, and the history shows no "
                "failover between (no leader change in the polls' placements, no lost "
                "acknowledgement)")
    if kind == "share-delivery-count":
        return (f"share group {group} delivered {rec} to {name(a)} with count "
                f"{r.get('count')}, outside [1, {r.get('limit')}]")
    return ", ".join(f"{k}={v}" for k, v in r.items())


def delivery_lines(inv: Investigation) -> list[str]:
    """Each delivery of the offsets in question to a share consumer: the story a share
    verdict is judged on (``story.share_deliveries``)."""
    if not inv.deliveries:
        return []
    t0 = min((inv.invoked.get(o.index, o.time) for o in inv.key_ops), default=0)
    out = [f"Deliveries to share consumers of key {inv.key}'s offsets in question:"]
    rows = [("", "offset", "value", "group", "poll", "process", "invoked", "count", "leader",
             "acknowledged")]
    for off, ds in sorted(inv.deliveries.items()):
        for d in ds:
            mark = "*" if d.poll.index in inv.highlight else ""
            rows.append((mark, str(off), str(d.value), str(d.group), inv.label(d.poll.index),
                         str(d.poll.process), when(d.start, t0), str(d.count),
                         "?" if d.leader is None else str(d.leader), _acked(inv, d)))
    return out + _table(rows)


def _acked(inv: Investigation, d: ShareDelivery) -> str:
    if d.ack is None:
        return "never (its lock expires)"
    return f"{str(d.outcome).upper()} by op {inv.label(d.ack.index)}: {d.ack.type}"


def render(inv: Investigation) -> str:
    ev = inv.evidence
    key = inv.key
    where = f" (topic {ev.topic}, partition {ev.partition})" if ev.topic is not None else ""
    what = ev.anomaly or "the ops"
    lines = [f"kmon investigate: {what}{f' {ev.id}' if ev.id else ''} on key {key}{where}"]
    bits = []
    if ev.offsets:
        bits.append(f"offsets {ev.offsets}")
    if ev.values:
        bits.append(f"values {ev.values}")
    if ev.ops:
        bits.append("ops " + ", ".join(inv.label(i) for i in sorted(ev.op_indices)))
    if bits:
        lines.append("evidence: " + ", ".join(bits))
    lines.append(f"source: {inv.source} ({inv.total_ops} ops read, {len(inv.key_ops)} of key "
                 f"{key})")
    if inv.skipped:
        lines.append(f"warning: {len(inv.skipped)} op events could not be decoded and are "
                     f"missing (first: {inv.skipped[0]})")
    lines.append("")

    t0 = min((inv.invoked.get(o.index, o.time) for o in inv.key_ops), default=0)
    span = f"offsets {inv.window[0]}..{inv.window[1]} (±{inv.n})" if inv.window else "all offsets"
    lines.append(f"Ops on key {key} around {span}, trimmed to the key ({len(inv.ops)}):")
    rows = [("", "op", "process", "invoked", "completed", "outcome", "f", f"on key {key}")]
    highlight = inv.highlight
    for op in inv.ops:
        mark = "*" if op.index in highlight else ""
        rows.append((mark, inv.label(op.index), str(op.process),
                     when(inv.invoked.get(op.index, op.time), t0), when(op.time, t0), op.type,
                     op.f, did(op, key)))
    lines += _table(rows)
    lines.append("")

    lines.append(f"Log of key {key}" + (f", offsets {inv.window[0]}..{inv.window[1]}:"
                                        if inv.window else ":"))
    rows = [("", "offset", "value", "written by", "read by")]
    for off, slot in inv.log.items():
        mark = "*" if off in ev.offsets else ""
        values = slot.values
        for value in values:
            writers = ", ".join(f"op {inv.label(o.index)} (p{o.process}, {o.type})"
                                for o in slot.writers.get(value, [])) or "-"
            readers = slot.readers.get(value, [])
            procs = sorted({str(o.process) for o in readers})
            read = (f"{len(readers)} polls by processes {', '.join(procs)}" if readers
                    else "never read")
            conflict = "  <- several values at one offset" if len(values) > 1 else ""
            rows.append((mark, str(off), str(value), writers, read + conflict))
    lines += _table(rows)
    for value, op in inv.unplaced:
        lines.append(f"  write without a known offset: {value} by op {inv.label(op.index)} "
                     f"(process {op.process}, {op.type})")
    lines.append("")
    if inv.deliveries:
        lines += delivery_lines(inv)
        lines.append("")

    lines += verdict_lines(inv)
    return "\n".join(lines) + "\n"


def verdict_lines(inv: Investigation) -> list[str]:
    v = inv.verdict
    n_ops = len(inv.key_ops)
    out = []
    if v.anomaly is None:
        found = [(r["anomaly"], r) for r in v.matched]
        out.append(f"Verdict: the checker, re-run over the {n_ops} ops of key {inv.key}, finds "
                   f"{len(found) or 'no'} anomal{'y' if len(found) == 1 else 'ies'} at these "
                   "offsets" + (":" if found else "."))
        for kind, r in found:
            record = {k: x for k, x in r.items() if k != "anomaly"}
            out.append(f"  {kind}: {explain(kind, record, inv)}.")
    elif v.confirmed:
        out.append(f"Verdict: {v.anomaly} confirmed: the checker, re-run over the {n_ops} ops of "
                   f"key {inv.key}, finds it:")
        for r in v.matched:
            out.append(f"  {explain(v.anomaly, r, inv)}.")
    else:
        out.append(f"Verdict: {v.anomaly} NOT reproduced from the {n_ops} ops of key {inv.key}.")
        if v.anomaly in CROSS_KEY:
            out.append("  It spans keys: re-check the whole history (kmon check) to see it.")
        else:
            out.append("  The op events may be incomplete (dead letters, dropped events) or the "
                       "evidence may point elsewhere.")
        if v.anomaly is not None and v.anomaly.startswith("share-"):
            out.append("  Share groups' verdicts also depend on the settings: --share-lock, "
                       "--share-delivery-limit and --share-skew must be the monitor's.")
    if v.anomaly is not None:
        from kmon.dashboards.rules import ANOMALY_SEVERITY

        severity = ANOMALY_SEVERITY.get(v.anomaly, "critical")
        if v.allowed_reason:
            out.append(f"  Allowed by Kafka's model for {v.isolation} consumers: "
                       f"{v.allowed_reason}. It does not page.")
        elif severity != "critical":
            out.append(f"  Kafka's model forbids it for {v.isolation} consumers: it alerts "
                       f"with severity {severity} (alert KmonAnomaly-{v.anomaly}), no page.")
        else:
            out.append(f"  Kafka's model forbids it for {v.isolation} consumers: it pages "
                       f"(alert KmonAnomaly-{v.anomaly}).")
    others = {k: len(rs) for k, rs in v.others.items()}
    if others:
        out.append("Other anomalies on this key: " + ", ".join(f"{k} x{n}"
                                                               for k, n in others.items()))
    return out


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def to_json(inv: Investigation) -> dict[str, Any]:
    """The investigation as one JSON object (what `--json` prints)."""
    ev, v = inv.evidence, inv.verdict
    return jsonable({
        "evidence": {"id": ev.id, "anomaly": ev.anomaly, "key": ev.key, "topic": ev.topic,
                     "partition": ev.partition, "offsets": ev.offsets, "values": ev.values,
                     "ops": sorted(ev.op_indices)},
        "source": inv.source,
        "window": list(inv.window) if inv.window else None,
        "ops": [{**op_to_wire(op), "invoke-time": inv.invoked.get(op.index)} for op in inv.ops],
        "log": [{"offset": off, "values": [
            {"value": val, "writers": [o.index for o in slot.writers.get(val, [])],
             "readers": [o.index for o in slot.readers.get(val, [])]}
            for val in slot.values]} for off, slot in inv.log.items()],
        "verdict": {"anomaly": v.anomaly, "confirmed": v.confirmed, "isolation": v.isolation,
                    "records": v.matched, "allowed": v.allowed_reason,
                    "others": {k: len(rs) for k, rs in v.others.items()}},
        "key-ops": len(inv.key_ops),
        "undecodable-events": inv.skipped,
        "deliveries": [{"offset": off, "value": d.value, "group": d.group, "poll": d.poll.index,
                        "process": d.poll.process, "invoke-time": d.start, "count": d.count,
                        "leader": d.leader, "ack": None if d.ack is None else d.ack.index,
                        "outcome": d.outcome, "ack-type": None if d.ack is None else d.ack.type}
                       for off, ds in sorted(inv.deliveries.items()) for d in ds],
    })
