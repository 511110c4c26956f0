"""`kmon setup`: Install-time set-up: fetch Kafka and Spark connector jars into the cache, check Java and Prometheus."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup", help="Install-time set-up: fetch Kafka and Spark connector jars into the cache, check Java and Prometheus.", description="Install-time set-up: fetch Kafka and Spark connector jars into the cache, check Java and Prometheus.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon setup: not implemented yet")
