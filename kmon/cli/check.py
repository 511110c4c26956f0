"""`kmon check`: Check a history file (JSON, JSONL or Jepsen EDN) for anomalies."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="Check a history file (JSON, JSONL or Jepsen EDN) for anomalies.",
        description="Check a history file (JSON, JSONL or Jepsen EDN) for anomalies.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon check: not implemented yet")
