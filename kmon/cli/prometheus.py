"""`kmon prometheus`: Start or stop the local Prometheus scraping probes and monitor."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prometheus", help="Start or stop the local Prometheus scraping probes and monitor.", description="Start or stop the local Prometheus scraping probes and monitor.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon prometheus: not implemented yet")
