"""The `kmon` command. Each subcommand lives in its own module with `register(subparsers)`.

Subcommands only parse arguments and call into the packages; nothing imports this package.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kmon import __version__

# Module names under kmon.cli, in the order `kmon --help` lists them.
SUBCOMMANDS = [
    "setup",
    "run",
    "cluster",
    "prometheus",
    "check",
    "probe",
    "monitor",
    "pack",
    "nemesis",
    "dashboards",
    "investigate",
    "evidence",
]


class UsageError(Exception):
    """A bad setting or argument: printed as `kmon: error: ...` with exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kmon",
        description="Online anomaly monitor for Kafka and Kafka-compatible clusters.",
    )
    parser.add_argument("--version", action="version", version=f"kmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"kmon.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"kmon: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
