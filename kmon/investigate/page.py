"""An investigation as one self-contained HTML page (inline CSS, SVG and a little script).

- ``#log``: how each process saw the key's log: one column per offset of the window, a row for
  the log itself (the value at each offset) and one row per process, each cell marking what
  that process wrote (blue) or read (green) there. Evidence offsets are outlined in red; an
  acknowledged value nobody read is filled red.
- ``#timeline``: one lane per process, each op a bar from its invocation to its completion,
  labelled with what it did to the key; the evidence's ops in red. A share consumer's polls
  (``d`` and the offsets delivered) and acknowledgements (``ack``, purple) are bars too, and
  its deliveries count as reads in ``#log``.
- the ops table and the verdict, as the text report has them.

The script only adds hover highlighting (every cell of the same value) and records on
``<body data-rendered>`` how many lanes and op bars the browser laid out, which the browser
test reads back.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from kmon.history.model import MOP_FS, SHARE_FS, Op
from kmon.investigate.story import same_key
from kmon.investigate.text import delivery_lines, did, verdict_lines, when

if TYPE_CHECKING:
    from kmon.investigate import Investigation

CELL, LABEL_W, ROW_H, TIMELINE_W, MAX_BARS = 34, 150, 22, 1000, 500

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
.verdict { padding: 8px 12px; border-left: 6px solid #888; background: #f6f6f6; }
.verdict pre { white-space: pre-wrap; margin: 0; }
.verdict.confirmed.forbidden { border-color: #d62728; } .verdict.allowed { border-color: #1f77b4; }
svg text { font: 11px monospace; fill: #222; }
.cell { stroke: #ccc; fill: #fff; }
.cell.write { fill: #1f77b4; } .cell.read { fill: #2ca02c; }
.cell.write.read { fill: #17becf; } .cell.unread { fill: #d62728; }
.cell.conflict { fill: #ff7f0e; }
.col.evidence { fill: none; stroke: #d62728; stroke-width: 3; }
.op rect { fill: #2ca02c; stroke: #145214; } .op.send rect, .op.txn rect { fill: #1f77b4; }
.op.ack rect { fill: #9467bd; stroke: #4b2c6b; }
.op.fail rect { fill: #bbb; } .op.info rect { fill: #ffbb78; }
.op.evidence rect { fill: #d62728; stroke: #7f0000; }
.lane-bg { fill: #fafafa; stroke: #eee; }
.hl { stroke: #000 !important; stroke-width: 2 !important; }
table { border-collapse: collapse; font: 12px monospace; }
td, th { border-bottom: 1px solid #eee; padding: 2px 8px; text-align: left; }
tr.evidence { background: #fde0e0; }
"""

SCRIPT = """
(function () {
  var lanes = document.querySelectorAll('#timeline .lane');
  var drawn = 0;
  document.querySelectorAll('#timeline .op rect').forEach(function (r) {
    var b = r.getBoundingClientRect();
    if (b.width > 0 && b.height > 0) { drawn++; }
  });
  var cells = 0;
  document.querySelectorAll('#log .cell').forEach(function (r) {
    if (r.getBoundingClientRect().width > 0) { cells++; }
  });
  document.body.dataset.rendered = 'lanes=' + lanes.length + ' ops=' + drawn + ' cells=' + cells;
  document.querySelectorAll('[data-values]').forEach(function (el) {
    el.addEventListener('mouseenter', function () {
      var vs = el.dataset.values.split(' ');
      document.querySelectorAll('[data-values]').forEach(function (o) {
        if (o.dataset.values.split(' ').some(function (v) { return v && vs.indexOf(v) >= 0; })) {
          o.classList.add('hl');
        }
      });
    });
    el.addEventListener('mouseleave', function () {
      document.querySelectorAll('.hl').forEach(function (o) { o.classList.remove('hl'); });
    });
  });
}());
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _proc_key(p: Any) -> tuple[int, Any]:
    return (0, p) if isinstance(p, int) else (1, str(p))


def _seen(inv: Investigation) -> dict[Any, dict[int, dict[str, set[str]]]]:
    """process -> offset -> {"write": values, "read": values}."""
    out: dict[Any, dict[int, dict[str, set[str]]]] = {}
    for op in inv.ops:
        if op.f not in MOP_FS and op.f != "share-poll":
            out.setdefault(op.process, {})
            continue
        for m in op.value or ():
            if m[0] == "share-read" and m[2] and same_key(m[1], inv.key):
                for off, value, _ in m[2]:
                    cell = out.setdefault(op.process, {}).setdefault(
                        off, {"write": set(), "read": set()})
                    cell["read"].add(str(value))
            elif m[0] == "send" and m[3] is not None and same_key(m[1], inv.key):
                cell = out.setdefault(op.process, {}).setdefault(m[3], {"write": set(),
                                                                        "read": set()})
                cell["write"].add(str(m[2]))
            elif m[0] == "poll" and m[1]:
                for k, pairs in m[1].items():
                    if same_key(k, inv.key):
                        for off, value in pairs:
                            cell = out.setdefault(op.process, {}).setdefault(
                                off, {"write": set(), "read": set()})
                            cell["read"].add(str(value))
    return out


def _log_svg(inv: Investigation) -> str:
    offsets = list(range(inv.window[0], inv.window[1] + 1)) if inv.window else list(inv.log)
    offsets = [o for o in offsets if o >= 0] or list(inv.log)
    seen = _seen(inv)
    procs = sorted(seen, key=_proc_key)
    width = LABEL_W + CELL * len(offsets) + 10
    height = ROW_H * (len(procs) + 2) + 10
    parts = [f'<svg id="log" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" role="img" aria-label="the key\'s log as each process saw it">']
    for j, off in enumerate(offsets):
        x = LABEL_W + j * CELL
        parts.append(f'<text x="{x + 3}" y="14">{off}</text>')
    y = ROW_H
    parts.append(f'<text x="4" y="{y + 15}">log</text>')
    for j, off in enumerate(offsets):
        x, slot = LABEL_W + j * CELL, inv.log.get(off)
        cls, vals = ["cell", "logcell"], []
        if slot is not None:
            vals = [str(v) for v in slot.values]
            if len(vals) > 1:
                cls.append("conflict")
            elif slot.writers and not slot.readers and any(
                    o.type == "ok" for ws in slot.writers.values() for o in ws):
                cls.append("unread")
            else:
                cls.append("write" if slot.writers else "read")
        title = f"offset {off}: " + (", ".join(vals) if vals else "nothing seen")
        parts.append(f'<rect class="{" ".join(cls)}" data-offset="{off}" '
                     f'data-values="{_e(" ".join(vals))}" x="{x}" y="{y}" width="{CELL}" '
                     f'height="{ROW_H}"><title>{_e(title)}</title></rect>')
    for i, p in enumerate(procs):
        y = ROW_H * (i + 2)
        parts.append(f'<g class="lane" data-process="{_e(p)}"><text x="4" y="{y + 15}">'
                     f'process {_e(p)}</text>')
        for j, off in enumerate(offsets):
            x, cell = LABEL_W + j * CELL, seen[p].get(off)
            cls = ["cell"]
            vals: set[str] = set()
            if cell:
                cls += [k for k in ("write", "read") if cell[k]]
                vals = cell["write"] | cell["read"]
            what = (f"wrote {sorted(cell['write'])} " if cell and cell["write"] else "") + (
                f"read {sorted(cell['read'])}" if cell and cell["read"] else "")
            parts.append(f'<rect class="{" ".join(cls)}" data-offset="{off}" '
                         f'data-values="{_e(" ".join(sorted(vals)))}" x="{x}" y="{y}" '
                         f'width="{CELL}" height="{ROW_H}"><title>process {_e(p)}, offset '
                         f'{off}: {_e(what or "-")}</title></rect>')
        parts.append("</g>")
    for j, off in enumerate(offsets):
        if off in inv.evidence.offsets:
            x = LABEL_W + j * CELL
            parts.append(f'<rect class="col evidence" data-offset="{off}" x="{x}" y="{ROW_H}" '
                         f'width="{CELL}" height="{ROW_H * (len(procs) + 1)}"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def _share_values(op: Op) -> list[Any]:
    return [v for m in op.value or () if m[0] == "share-read" and m[2] for _, v, _ in m[2]]


def _label(op: Op, key: Any) -> str:
    if op.f == "share-poll":
        offs = [o for m in op.value or () if m[0] == "share-read" and m[2] for o, _, _ in m[2]]
        return ("d" + ",".join(map(str, offs))) if offs else op.f
    if op.f == "ack":
        return "ack " + ",".join(f"{m[2]}{str(m[3])[:1].upper()}" for m in op.value or ()
                                 if m[0] == "ack")
    w = [str(m[3]) for m in op.value or () if op.f in MOP_FS and m[0] == "send"
         and m[3] is not None]
    r = [o for m in op.value or () if op.f in MOP_FS and m[0] == "poll" and m[1]
         for pairs in m[1].values() for o, _ in pairs]
    text = (f"w{','.join(w)}" if w else "") + (f" r{min(r)}-{max(r)}" if r else "")
    return text.strip() or op.f


def _timeline_svg(inv: Investigation, highlight: set[int]) -> str:
    # Ops that act on the log set the time scale; assigns long before would squash it.
    ops = [op for op in inv.ops if op.f in MOP_FS or op.f in SHARE_FS][:MAX_BARS] \
        or inv.ops[:MAX_BARS]
    procs = sorted({op.process for op in ops}, key=_proc_key)
    lane = {p: i for i, p in enumerate(procs)}
    starts = [inv.invoked.get(op.index, op.time) for op in ops]
    t0 = min(starts, default=0)
    t1 = max((op.time for op in ops), default=t0 + 1)
    scale = (TIMELINE_W - 10) / max(t1 - t0, 1)
    height = ROW_H * len(procs) + 30
    parts = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" '
             f'width="{LABEL_W + TIMELINE_W}" height="{height}" role="img" '
             f'aria-label="ops on the key over time, one lane per process">']
    for p in procs:
        y = ROW_H * lane[p] + 20
        parts.append(f'<g class="lane" data-process="{_e(p)}">'
                     f'<rect class="lane-bg" x="{LABEL_W}" y="{y}" width="{TIMELINE_W}" '
                     f'height="{ROW_H}"/><text x="4" y="{y + 15}">process {_e(p)}</text>')
        for op, start in zip(ops, starts, strict=True):
            if op.process != p:
                continue
            x = LABEL_W + (start - t0) * scale
            w = max((op.time - start) * scale, 6)
            cls = ["op", op.f, op.type] + (["evidence"] if op.index in highlight else [])
            vals = " ".join(str(v) for m in op.value or () if op.f in MOP_FS
                            for v in ([m[2]] if m[0] == "send" else
                                      [v for pairs in (m[1] or {}).values() for _, v in pairs]
                                      if m[0] == "poll" else []))
            if op.f == "share-poll":
                vals = " ".join(str(v) for v in _share_values(op))
            parts.append(
                f'<g class="{" ".join(cls)}" data-index="{op.index}" data-values="{_e(vals)}">'
                f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{ROW_H - 6}"/>'
                f'<title>op {_e(inv.label(op.index))} {op.type} {op.f}: '
                f'{_e(did(op, inv.key))}</title></g>')
            if w > 40:
                parts.append(f'<text x="{x + 2:.1f}" y="{y + 15}">{_e(_label(op, inv.key))}'
                             "</text>")
        parts.append("</g>")
    parts.append(f'<text x="{LABEL_W}" y="12">{_e(when(t0, t0))}</text>'
                 f'<text x="{LABEL_W + TIMELINE_W - 120}" y="12">{_e(when(t1, t0))}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render(inv: Investigation) -> str:
    ev, v = inv.evidence, inv.verdict
    hl = inv.highlight
    title = f"{ev.anomaly or 'ops'} on key {inv.key}"
    where = f" (topic {ev.topic}, partition {ev.partition})" if ev.topic is not None else ""
    state = ("confirmed" if v.confirmed else "unconfirmed") + (
        " allowed" if v.allowed_reason else " forbidden")
    t0 = min((inv.invoked.get(o.index, o.time) for o in inv.key_ops), default=0)
    rows = []
    for op in inv.ops:
        cls = ' class="evidence"' if op.index in hl else ""
        rows.append(
            f"<tr{cls} data-index=\"{op.index}\"><td>{_e(inv.label(op.index))}</td>"
            f"<td>{_e(op.process)}</td><td>{_e(when(inv.invoked.get(op.index, op.time), t0))}"
            f"</td><td>{_e(when(op.time, t0))}</td><td>{_e(op.type)}</td><td>{_e(op.f)}</td>"
            f"<td>{_e(did(op, inv.key))}</td></tr>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>kmon investigate: {_e(title)}</title>
<style>{CSS}</style></head>
<body data-rendered="">
<h1>kmon investigate: {_e(title)}{_e(where)}{_e(f" — {ev.id}" if ev.id else "")}</h1>
<p>Source: {_e(inv.source)}; {len(inv.key_ops)} ops of key {_e(inv.key)}; window
{_e(f"{inv.window[0]}..{inv.window[1]}" if inv.window else "all offsets")}.</p>
<div class="verdict {state}" id="verdict"><pre>{_e(chr(10).join(verdict_lines(inv)))}</pre></div>
<h2>How each process saw key {_e(inv.key)}'s log</h2>
<p>Blue: wrote, green: read, red: acknowledged but never read, orange: several values at one
offset; evidence offsets outlined in red. Hover a cell to find its value everywhere.</p>
{_log_svg(inv)}
<h2>Timeline</h2>
<p>Each op from its invocation to its completion, one lane per process; the evidence's ops in
red.</p>
{_timeline_svg(inv, hl)}
<h2>Ops on key {_e(inv.key)}, trimmed to the key</h2>
<table id="ops"><thead><tr><th>op</th><th>process</th><th>invoked</th><th>completed</th>
<th>outcome</th><th>f</th><th>on the key</th></tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table>
{_deliveries_html(inv)}
<script>{SCRIPT}</script>
</body></html>
"""


def _deliveries_html(inv: Investigation) -> str:
    """The share deliveries of the offsets in question, as the text report lists them."""
    lines = delivery_lines(inv)
    if not lines:
        return ""
    return (f"<h2>Deliveries to share consumers</h2>\n<pre id=\"deliveries\">"
            f"{_e(chr(10).join(lines[1:]))}</pre>")
