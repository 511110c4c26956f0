"""`kmon probe`: Run the continuous Jepsen-style probe workload against a cluster."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "probe",
        help="Run the continuous Jepsen-style probe workload against a cluster.",
        description="Run the continuous Jepsen-style probe workload against a cluster.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon probe: not implemented yet")
