"""`kmon check`: Check a history file (JSON, JSONL or Jepsen EDN) for anomalies.

Exit status: 0 valid, 1 anomalies found (or nothing tested), 2 bad input. With ``--json``
exactly one JSON object goes to stdout, also for bad input (``"valid": "unknown"``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kmon.checker import CheckConfig, Checker
from kmon.checker.policy import ISOLATION_LEVELS
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.history)
    checker = Checker(CheckConfig(ww_deps=args.ww_deps, isolation=args.isolation))
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
