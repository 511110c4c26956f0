"""`kmon evidence`: List the evidence records of a time window, filtered."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import TYPE_CHECKING

from kmon.cli import UsageError
from kmon.cli.investigate import add_connection, connection_config

if TYPE_CHECKING:
    from kmon.investigate.listing import Filters
    from kmon.investigate.timewindow import TimeWindow

SUMMARY = "List the evidence records of a time window, filtered."
DESCRIPTION = """\
List the evidence records the monitor wrote to the anomalies topic in a time window: by
default the last hour (--since 1h); --at TIME with --window D (default 15m) for TIME-D .. TIME+D;
or --from TIME [--to TIME]. TIME is ISO-8601 (UTC when no zone is given) or unix seconds; a
DURATION is 90s, 15m, 1h, 7d (seconds when bare). Only the window is read: each partition of the
anomalies topic is sought with offsets_for_times to the window's start and read to its end,
never the whole topic. The window is on record timestamps (when the monitor emitted the record),
found through the broker's time index: a record produced long after the time it carries (out of
order with its neighbours) can be missed.

Filters keep records of one --cluster, --anomaly (a checker anomaly name, or unseen), --topic,
--partition, --broker (the leader when decided, or `unknown`). Records without a cluster or
broker field (written before they existed) pass those filters, shown as `?`.

Rows print as they are read (each partition in time order); then a count on stderr. Give a
row's id to `kmon investigate ID --at EMITTED` for its story. Exit status: 0 when a record
matched, 1 when none did, 2 for bad flags or an unreachable cluster."""

_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evidence", help=SUMMARY, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", help="only records of this cluster (the monitor's `cluster`)")
    p.add_argument("--anomaly", help="only records of this type (an anomaly name, or unseen)")
    p.add_argument("--topic", help="only records of this probe topic")
    p.add_argument("--partition", type=int, metavar="N", help="only records of this partition")
    p.add_argument("--broker", metavar="ID",
                   help="only records decided while this broker led the key (or `unknown`)")
    p.add_argument("--since", metavar="DURATION", help="the last DURATION (default 1h)")
    p.add_argument("--at", metavar="TIME", help="around TIME (see --window)")
    p.add_argument("--window", metavar="DURATION",
                   help="with --at: TIME-DURATION .. TIME+DURATION (default 15m)")
    p.add_argument("--from", dest="from_", metavar="TIME", help="from TIME (to --to, or now)")
    p.add_argument("--to", metavar="TIME", help="with --from: up to TIME")
    p.add_argument("--limit", type=int, metavar="N", help="stop after N records")
    p.add_argument("--json", action="store_true",
                   help="print the records as JSON lines (as written) instead of a table")
    add_connection(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmon.investigate.listing import Listing, header, table_line
    from kmon.investigate.sources import SourceError, TopicReader

    filters, window = _filters(args), _window(args)
    conf = connection_config(args)
    started, shown = time.monotonic(), 0
    try:
        with TopicReader(conf, args.anomalies_topic, args.timeout) as reader:
            listing = Listing(reader, window, filters)
            if not args.json:
                print(header(), flush=True)
            for row in listing.rows():
                print(json.dumps(row.record) if args.json else table_line(row), flush=True)
                shown += 1
                if args.limit is not None and shown >= args.limit:
                    break
    except SourceError as e:
        raise UsageError(str(e)) from e
    print(f"kmon evidence: {shown} records of {window.describe()}"
          f"{' (--limit reached)' if args.limit is not None and shown >= args.limit else ''}; "
          f"{listing.read} read from {args.anomalies_topic} in "
          f"{time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0 if shown else 1


def _filters(args: argparse.Namespace) -> Filters:
    from kmon.checker.anomaly import ANOMALY_TYPES, UNSEEN
    from kmon.investigate.listing import UNKNOWN, Filters

    names = (*ANOMALY_TYPES, UNSEEN)
    if args.anomaly is not None and args.anomaly not in names:
        raise UsageError(f"--anomaly {args.anomaly!r} is not one of {', '.join(names)}")
    if args.cluster is not None and not _CLUSTER.fullmatch(args.cluster):
        raise UsageError(f"--cluster {args.cluster!r} is not a cluster name "
                         "([A-Za-z0-9][A-Za-z0-9._-]{0,62})")
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"--partition {args.partition} is negative")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit} must be at least 1")
    return Filters(cluster=args.cluster, anomaly=args.anomaly, topic=args.topic,
                   partition=args.partition, broker=_broker(args.broker, UNKNOWN))


def _broker(text: str | None, unknown: str) -> int | str | None:
    if text is None or text == unknown:
        return text
    if not text.isdigit():
        raise UsageError(f"--broker {text!r} is neither a broker id nor {unknown!r}")
    return int(text)


def _window(args: argparse.Namespace) -> TimeWindow:
    from kmon.investigate.timewindow import WindowError, WindowFlags, resolve_window

    try:
        return resolve_window(WindowFlags(since=args.since, at=args.at, window=args.window,
                                          from_=args.from_, to=args.to))
    except WindowError as e:
        raise UsageError(str(e)) from e
