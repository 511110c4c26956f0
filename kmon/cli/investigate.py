"""`kmon investigate`: Tell the story of an anomaly: the ops around a key and offset."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("investigate", help=__doc__.split(": ", 1)[1],
                       description=__doc__.split(": ", 1)[1])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon investigate: not implemented yet")
