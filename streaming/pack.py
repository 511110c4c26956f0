"""Packing part rows into one row per key, before the shuffle to the stateful operator.

PySpark's stateful pandas API turns every input row into a tuple and rebuilds a pandas frame
from them (``itertuples`` then ``DataFrame(rows)``): a cost per row *and per column*, several
times the fold's own. So the monitor feeds it few, wide rows: a stateless ``mapInArrow`` step,
vectorized with pyarrow, sorts each Arrow batch of part rows by (probe, key, op index, position)
and packs each key's parts into one row of list columns (``PACKED_COLUMNS``). A micro-batch
then brings each key a handful of rows instead of thousands.

Reads, a list per part, are flattened per packed row: ``r_off``/``r_val``/``r_str``/``r_vs``
hold every read record of the key's parts back to back, and ``r_len`` says how many belong to
each part (-1: the part is not a read). Pure pyarrow: no Spark import, testable alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

KEY = ("probe", "kl", "ks")
# Per-part scalar columns, packed as lists in this order.
SCALARS = ("idx", "proc", "type", "f", "t", "it", "pos", "kind", "sv", "ss", "so", "nw",
           "topic", "part", "dl_raw", "dl_src")
READS = ("r_off", "r_val", "r_str", "r_vs")
PACKED_COLUMNS = (*KEY, *SCALARS, "r_len", *READS)


def packed_schema(parts: pa.Schema) -> pa.Schema:
    """The packed rows' Arrow schema, from the part rows' schema."""
    fields = [parts.field(c) for c in KEY]
    fields += [pa.field(c, pa.list_(parts.field(c).type)) for c in SCALARS]
    fields.append(pa.field("r_len", pa.list_(pa.int32())))
    fields += [pa.field(c, parts.field(c).type) for c in READS]  # already lists: flattened
    return pa.schema(fields)


def _boundaries(t: pa.Table) -> list[int]:
    """Row offsets where a new (probe, kl, ks) group starts in sorted ``t``, plus the end."""
    n = t.num_rows
    if n == 0:
        return [0]
    change = None
    for c in KEY:
        a, b = t[c].slice(1), t[c].slice(0, n - 1)
        # null-aware: two nulls are equal, null and a value are not
        diff = pc.or_(pc.xor(pc.is_null(a), pc.is_null(b)),
                      pc.fill_null(pc.not_equal(a, b), False))
        change = diff if change is None else pc.or_(change, diff)
    starts = pc.indices_nonzero(change).to_numpy() + 1
    return [0, *starts.tolist(), n]


def pack_table(t: pa.Table) -> pa.Table:
    """One row per (probe, kl, ks) of part rows ``t``, its parts in (idx, pos) order."""
    schema = packed_schema(t.schema)
    if t.num_rows == 0:
        return schema.empty_table()
    t = t.sort_by([("probe", "ascending"), ("kl", "ascending"), ("ks", "ascending"),
                   ("idx", "ascending"), ("pos", "ascending")])
    bounds = _boundaries(t)
    offsets = pa.array(bounds, pa.int32())
    first = pa.array(bounds[:-1], pa.int32())
    cols = [t[c].take(first) for c in KEY]
    for c in SCALARS:
        cols.append(pa.ListArray.from_arrays(offsets, t[c].combine_chunks()))
    r_off = t["r_off"].combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(r_off), -1).cast(pa.int32())
    cols.append(pa.ListArray.from_arrays(offsets, lengths))
    for c in READS:
        parts = t[c].combine_chunks()
        if parts.offset:  # a sliced array: take its own view of offsets and values
            parts = pa.concat_arrays([parts])
        # Records of group g are values[part_offsets[bounds[g]] : part_offsets[bounds[g+1]]].
        # A null list (a part without reads, or r_str when all values are longs) adds none.
        part_offsets = parts.offsets
        group_offsets = part_offsets.take(offsets)
        cols.append(pa.ListArray.from_arrays(group_offsets, parts.values))
    return pa.Table.from_arrays(cols, schema=schema)


def pack_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: each incoming Arrow batch of part rows -> its packed rows."""
    for b in batches:
        yield from pack_table(pa.Table.from_batches([b])).to_batches()
