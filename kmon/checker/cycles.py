"""Dependency cycles between committed ops: G0 and G1c (Adya's names, found as Elle does).

Vertices are ok (or info-but-proven-visible) writers and ok readers. Edges:
- ``ww``: ``T1`` wrote ``v1`` and ``T2`` wrote ``v2``, the next value after ``v1`` in a key's
  version order. Inferred from log order, so only with ``--ww-deps``.
- ``wr``: ``T2`` read a value ``T1`` wrote (any read, as Jepsen's graph does: a cycle may run
  through a value below T2's highest read of the key).

- ``G0`` (write cycle): a cycle of ww edges. Normal in Kafka: concurrent transactions' writes
  interleave in partitions.
- ``G1c`` (circular information flow): a cycle of ww and wr edges with at least one wr edge.
  Example: ``T1 = [send x 1] [poll y -> 2]``, ``T2 = [send y 2] [poll x -> 1]``, both ok:
  each read the other's write.

Record: ``{key, keys, cycle: [op, ..., op], steps: [{type, key, value}, ...]}``; ``cycle``
starts and ends at the same op and ``steps[i]`` is the edge from ``cycle[i]`` to ``cycle[i+1]``.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from kmon.checker.anomaly import G0, G1C, Anomaly

# a -> b -> {edge type: (key, value)}
Graph = dict[int, dict[int, dict[str, tuple[Any, Any]]]]


def add_edge(g: Graph, a: int, b: int, kind: str, key: Any, value: Any) -> None:
    if a == b:
        return
    g.setdefault(a, {}).setdefault(b, {}).setdefault(kind, (key, value))
    g.setdefault(b, {})


def _restrict(g: Graph, kinds: set[str]) -> Graph:
    out: Graph = {}
    for a, succ in g.items():
        out[a] = {}
        for b, es in succ.items():
            kept = {k: e for k, e in es.items() if k in kinds}
            if kept:
                out[a][b] = kept
    return out


def sccs(g: Graph) -> list[list[int]]:
    """Strongly connected components with two or more vertices (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(g[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(g[nxt])))
                elif nxt in on_stack:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _path(g: Graph, members: set[int], src: int, dst: int) -> list[int] | None:
    """Shortest path src -> dst inside ``members`` (BFS)."""
    prev: dict[int, int] = {src: src}
    queue = deque([src])
    while queue and dst not in prev:
        v = queue.popleft()
        for w in g[v]:
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    if dst not in prev:
        return None
    path = [dst]
    while path[-1] != src:
        path.append(prev[path[-1]])
    return path[::-1]


def _record(g: Graph, cycle: list[int], first_kind: str) -> dict[str, Any]:
    steps = []
    for n, (a, b) in enumerate(itertools.pairwise(cycle)):
        es = g[a][b]
        kind = first_kind if n == 0 else ("wr" if "wr" in es else "ww")
        key, value = es[kind]
        steps.append({"type": kind, "key": key, "value": value})
    keys: list[Any] = []
    for s in steps:
        if s["key"] not in keys:
            keys.append(s["key"])
    return {"key": keys[0], "keys": keys, "cycle": cycle, "steps": steps}


def find_cycles(g: Graph) -> list[Anomaly]:
    """One G0 per strongly connected ww component; one G1c per component with a wr edge."""
    found: list[Anomaly] = []
    ww = _restrict(g, {"ww"})
    for comp in sccs(ww):
        members = set(comp)
        a = comp[0]
        b = next(w for w in ww[a] if w in members)
        back = _path(ww, members, b, a)
        if back is not None:
            found.append(Anomaly(G0, _record(ww, [a, *back], "ww")))
    for comp in sccs(g):
        members = set(comp)
        for a in comp:
            target = next((w for w, es in g[a].items() if w in members and "wr" in es), None)
            if target is None:
                continue
            back = _path(g, members, target, a)
            if back is not None:
                found.append(Anomaly(G1C, _record(g, [a, *back], "wr")))
                break
    return found
