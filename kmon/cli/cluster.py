"""`kmon cluster`: Manage the local 3-broker KRaft Kafka cluster and inject process faults."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="Manage the local 3-broker KRaft Kafka cluster and inject process faults.", description="Manage the local 3-broker KRaft Kafka cluster and inject process faults.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon cluster: not implemented yet")
