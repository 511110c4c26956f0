"""Synthetic healthy histories, for benchmarks and tests: what a correct Kafka would produce.

A small in-memory model of partitions: each key has a log of offsets; sends append, committed
transactions append their records and then a commit marker, aborted ones their records and an
abort marker (so offsets are sparse like Kafka's); consumers poll from their position, skipping
invisible offsets, and rewind after an aborted transaction. Processes are given assign ops, and
every op is an invoke immediately followed by its completion. The run ends with final reads
(each process polls until it has read all its keys), as a real test does: nothing stays unseen.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from kmon.history.model import Op


@dataclass(frozen=True)
class SynthConfig:
    keys: int = 64
    processes: int = 16
    keys_per_process: int = 8
    txn_share: float = 0.3  # share of write ops that are transactions
    abort_share: float = 0.2  # share of transactions aborted on purpose
    poll_share: float = 0.5  # share of ops that are polls
    max_poll_records: int = 8
    step_ns: int = 100_000  # time between events
    seed: int = 1


class _Key:
    __slots__ = ("log", "next")

    def __init__(self) -> None:
        self.log: list[tuple[int, int | None]] = []  # (offset, value or None if invisible)
        self.next = 0

    def append(self, value: int | None) -> int:
        off = self.next
        self.log.append((off, value))
        self.next += 1
        return off


class _Proc:
    __slots__ = ("keys", "pos", "seq")

    def __init__(self, keys: list[int]) -> None:
        self.keys = keys
        self.pos = {k: 0 for k in keys}  # index into the key's log of the next record
        self.seq = 0


def healthy(n_events: int, cfg: SynthConfig | None = None) -> Iterator[Op]:
    """Yield about ``n_events`` ops (invokes and completions) of a fault-free run, then final
    reads."""
    cfg = cfg or SynthConfig()
    rng = random.Random(cfg.seed)
    keys = [_Key() for _ in range(cfg.keys)]
    procs = [_Proc(rng.sample(range(cfg.keys), cfg.keys_per_process))
             for _ in range(cfg.processes)]
    index = 0
    t = 0

    def emit(p: int, type: str, f: str, value: object) -> Op:
        nonlocal index, t
        op = Op(index=index, time=t, process=p, type=type, f=f, value=value)
        index += 1
        t += cfg.step_ns
        return op

    for p, pr in enumerate(procs):
        yield emit(p, "invoke", "assign", list(pr.keys))
        yield emit(p, "ok", "assign", list(pr.keys))
    while index < n_events:
        p = rng.randrange(cfg.processes)
        pr = procs[p]
        r = rng.random()
        if r < cfg.poll_share:
            yield emit(p, "invoke", "poll", [("poll", None)])
            yield emit(p, "ok", "poll", [("poll", _poll(pr, keys, cfg.max_poll_records))])
        elif rng.random() < cfg.txn_share:
            yield from _txn(emit, p, pr, keys, rng, cfg)
        else:
            k = rng.choice(pr.keys)
            v = _value(p, pr)
            yield emit(p, "invoke", "send", [("send", k, v, None)])
            yield emit(p, "ok", "send", [("send", k, v, keys[k].append(v))])
    for p, pr in enumerate(procs):  # final reads
        while any(pr.pos[k] < len(keys[k].log) for k in pr.keys):
            yield emit(p, "invoke", "poll", [("poll", None)])
            yield emit(p, "ok", "poll", [("poll", _poll(pr, keys, cfg.max_poll_records))])


def _value(p: int, pr: _Proc) -> int:
    pr.seq += 1
    return (p << 32) | pr.seq


def _poll(pr: _Proc, keys: list[_Key], limit: int) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for k in pr.keys:
        log = keys[k].log
        i = pr.pos[k]
        got = []
        while i < len(log) and len(got) < limit:
            off, v = log[i]
            if v is not None:
                got.append((off, v))
            i += 1
        pr.pos[k] = i
        if got:
            out[k] = got
    return out


def _txn(emit, p: int, pr: _Proc, keys: list[_Key], rng: random.Random, cfg: SynthConfig):
    ks = rng.sample(pr.keys, min(len(pr.keys), rng.randint(1, 3)))
    vals = [_value(p, pr) for _ in ks]
    abort = rng.random() < cfg.abort_share
    start = dict(pr.pos)
    yield emit(p, "invoke", "txn", [("send", k, v, None) for k, v in zip(ks, vals, strict=True)]
               + [("poll", None)])
    reads = _poll(pr, keys, 4)
    sends = [("send", k, v, keys[k].append(None if abort else v))
             for k, v in zip(ks, vals, strict=True)]
    for k in ks:
        keys[k].append(None)  # the commit or abort marker
    if abort:
        pr.pos = start  # rewind to the transaction's first polled offsets
    yield emit(p, "fail" if abort else "ok", "txn", [*sends, ("poll", reads)])
