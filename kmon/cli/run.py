"""`kmon run`: Run the local stack (cluster, probes, monitor, Prometheus) until interrupted."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="Run the local stack (cluster, probes, monitor, Prometheus) until interrupted.", description="Run the local stack (cluster, probes, monitor, Prometheus) until interrupted.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon run: not implemented yet")
