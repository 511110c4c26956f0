"""`kmon pack`: kmon, its compiled checker and its dependencies as one archive for Spark
executors that do not have kmon installed (spark.archives; docs/monitor.md#on-a-spark-cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kmon.cli._local import errors_as_usage

HELP = (
    "Pack kmon (its checker compiled), and its runtime dependencies at the versions installed "
    "here, into a virtualenv archive for spark.archives, so that Spark executors without kmon "
    "can run the monitor: spark.archives=ARCHIVE#environment with "
    "PYSPARK_PYTHON=./environment/bin/python on the driver. PySpark is left out (the "
    "cluster's own is used). Built from the checkout kmon is installed from (a minute or two; "
    "pip may download), cached in KMON_CACHE/pack."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pack", help="pack kmon as a virtualenv archive for Spark executors",
                       description=HELP)
    p.add_argument("-o", "--output", metavar="PATH", type=Path, default=Path("kmon-env.tar.gz"),
                   help="where to write the archive (default: kmon-env.tar.gz)")
    p.add_argument("--cache", metavar="DIR", help="cache directory (env KMON_CACHE)")
    p.add_argument("--source", metavar="DIR", type=Path,
                   help="kmon's source tree (default: the checkout kmon is installed from)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmon.pack import pack

    with errors_as_usage():
        out = pack(args.output, Path(args.cache) if args.cache else None, source=args.source)
    print(out)
    return 0
