"""`kmon nemesis`: Inject real faults into the local cluster."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nemesis", help=__doc__.split(": ", 1)[1],
                       description=__doc__.split(": ", 1)[1])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon nemesis: not implemented yet")
