"""`kmon setup`: fetch Kafka, the Spark Kafka connector and S3A into the cache, install
Prometheus."""

from __future__ import annotations

import argparse
import time

from kmon.cli._local import errors_as_usage

HELP = (
    "Install-time set-up: check Java, fetch Kafka's jars, Spark's Kafka connector and S3A "
    "(hadoop-aws and the AWS SDK bundle, for s3a:// checkpoints; about 700 MB once) from "
    "Maven Central into the cache (env KMON_CACHE; default ~/.cache/kmon), install "
    "Prometheus from Debian's package if missing. Idempotent; offline and quick when warm."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "setup", help="fetch jars into the cache, install Prometheus", description=HELP
    )
    p.add_argument("--cache", metavar="DIR", help="cache directory (env KMON_CACHE)")
    p.add_argument(
        "--no-prometheus", dest="prometheus", action="store_false",
        help="do not check for (or install) Prometheus",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmon.env import kmon_cache
    from kmon.local.artifacts import setup

    started = time.monotonic()
    with errors_as_usage():
        setup(kmon_cache(args.cache), prometheus=args.prometheus)
    print(f"set-up done in {time.monotonic() - started:.1f}s")
    return 0
