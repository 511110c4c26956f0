"""`kmon nemesis`: Inject real faults into the local cluster.

Pauses, crashes, network faults, DeleteRecords.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nemesis",
        help="Inject real faults into the local cluster (pauses, crashes, network, DeleteRecords).",
        description=(
            "Inject real faults into the local cluster (pauses, crashes, network, DeleteRecords)."
        ),
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon nemesis: not implemented yet")
