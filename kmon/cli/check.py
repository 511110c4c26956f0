"""`kmon check`: Check a history file (JSON, JSONL or Jepsen EDN) for anomalies.

Exit status: 0 valid, 1 anomalies found (or nothing tested), 2 bad input. With ``--json``
exactly one JSON object goes to stdout, also for bad input (``"valid": "unknown"``).

Share groups' verdicts depend on the groups' configuration: --share-lock and
--share-delivery-limit must be their share.record.lock.duration.ms and
share.delivery.count.limit (Kafka's defaults, 30s and 5, unless told), as the monitor's
share.lock and share.delivery.limit settings are.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kmon.checker import CheckConfig, Checker
from kmon.checker.policy import ISOLATION_LEVELS
from kmon.cli import UsageError
from kmon.history import HistoryError, iter_ops

SUMMARY = "Check a history file (JSON, JSONL or Jepsen EDN) for anomalies."


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help=SUMMARY, description=__doc__.split(": ", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("history", metavar="HISTORY", help=".json, .jsonl or .edn history file")
    p.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    p.add_argument("--ww-deps", action="store_true",
                   help="infer write-write dependencies from log order (for G0/G1c)")
    p.add_argument("--isolation", choices=ISOLATION_LEVELS, default="read_committed",
                   help="the consumers' isolation level, which decides what is allowed")
    add_share_flags(p)
    p.set_defaults(func=run)


def add_share_flags(p: argparse.ArgumentParser) -> None:
    """The monitor's share.lock, share.delivery.limit and share.skew settings, same defaults
    (shared with `kmon investigate`, which re-runs the checker)."""
    p.add_argument("--share-lock", default="30s", metavar="DURATION",
                   help="share groups' acquisition lock, their share.record.lock.duration.ms "
                   "(default 30s)")
    p.add_argument("--share-delivery-limit", default="5", metavar="N",
                   help="share groups' share.delivery.count.limit (default 5)")
    p.add_argument("--share-skew", default="1s", metavar="DURATION",
                   help="clock skew allowed between the probes and the brokers, for share "
                   "groups' verdicts (default 1s; 0: none)")


def share_settings(args: argparse.Namespace) -> dict[str, int]:
    """``CheckConfig``'s share fields from the flags; UsageError naming a bad one. Parsed as
    the monitor parses its settings (``30s``, ``500ms``, ``1min``; bare numbers are seconds)."""
    from kmon.streaming.config import ConfigError
    from kmon.streaming.config import share_settings as validated

    try:
        lock, limit, skew = validated(args.share_lock, args.share_delivery_limit, args.share_skew,
                                      ("--share-lock", "--share-delivery-limit", "--share-skew"))
    except ConfigError as e:
        raise UsageError(str(e)) from None
    return {"share_lock_ns": round(lock * 1e9), "share_delivery_limit": limit,
            "share_skew_ns": round(skew * 1e9)}

def run(args: argparse.Namespace) -> int:
    path = Path(args.history)
    checker = Checker(CheckConfig(ww_deps=args.ww_deps, isolation=args.isolation,
                                  **share_settings(args)))
    try:
        if not path.is_file():
            raise HistoryError("no such file", path=str(path))
        for op in iter_ops(path):
            checker.apply(op)
    except HistoryError as exc:
        return _bad_input(exc, args.json)
    report = checker.finish()
    if args.json:
        json.dump(report.to_json(), sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
    else:
        print(report.summary())
    return 0 if report.valid else 1


def _bad_input(exc: HistoryError, as_json: bool) -> int:
    if as_json:
        json.dump({"valid": "unknown", "error": str(exc), "line": exc.line,
                   "field": exc.field}, sys.stdout)
        sys.stdout.write("\n")
    print(f"kmon check: {exc}", file=sys.stderr)
    return 2
