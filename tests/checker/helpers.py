"""Tiny history builders for checker tests, after Jepsen's kafka_test.clj."""

from __future__ import annotations

from typing import Any

from kmon.checker import CheckConfig, Checker, Report
from kmon.history.model import Op, Rebalance


def op(index: int, process: Any, type: str, f: str, value: Any = None, *,
       time: int | None = None, rebalance: list[Any] | None = None) -> Op:
    log = (Rebalance("assigned", tuple(rebalance)),) if rebalance else ()
    return Op(index=index, time=index * 10 if time is None else time, process=process,
              type=type, f=f, value=value, rebalance_log=log)


def send(k: Any, v: Any, off: int | None = None) -> tuple:
    return ("send", k, v, off)


def poll(reads: dict[Any, list[tuple[int, Any]]] | None = None) -> tuple:
    return ("poll", reads)


def history(*pairs: tuple) -> list[Op]:
    """Ops from (process, type, f, value) tuples; an invoke is added before each completion.

    Invokes carry the completion's sends without offsets, and a bare poll for polls.
    """
    ops: list[Op] = []
    for process, type, f, value in pairs:
        inv = value
        if f in ("send", "poll", "txn") and value is not None:
            inv = [("send", m[1], m[2], None) if m[0] == "send" else ("poll", None)
                   for m in value]
        ops.append(op(len(ops), process, "invoke", f, inv))
        ops.append(op(len(ops), process, type, f, value))
    return ops


def check(ops: list[Op], **config: Any) -> Report:
    return Checker(CheckConfig(**config)).run(ops)


def types(report: Report) -> set[str]:
    return set(report.errors)
