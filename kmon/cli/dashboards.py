"""`kmon dashboards`: Generate Grafana dashboards and alert rules, or push them to Grafana."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboards", help=__doc__.split(": ", 1)[1],
                       description=__doc__.split(": ", 1)[1])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("kmon dashboards: not implemented yet")
