"""`kmon investigate`: Tell the story of an anomaly: the ops around a key and offset."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kmon.cli import UsageError

if TYPE_CHECKING:
    from kmon.investigate import Evidence, Investigation
    from kmon.investigate.timewindow import TimeWindow

SUMMARY = "Tell the story of an anomaly: the ops around a key and offset."
DESCRIPTION = """\
Tell the story of an anomaly: the ops of one key (topic-partition) around the offsets in
question, trimmed to that key and to offsets within --window of them (Jepsen's
around-key-offset); who wrote what at which offset and who read it; and the checker's verdict,
re-derived from all the key's ops, with why it is or is not allowed by Kafka's model.

Start from an anomaly id (its evidence record is read from the anomalies topic, or from
--evidence FILE), or from --key with --offset and/or --value. Ops come from the events topic
(Avro op events) or from a history file (--history, any format `kmon check` reads).

Exit status: 0 when the checker confirms the anomaly (or, from a key, finds one there),
1 when it does not, 2 for bad input or an unreachable cluster."""


def register(sub: argparse._SubParsersAction) -> None:
    env = os.environ.get
    p = sub.add_parser("investigate", help=SUMMARY, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("id", nargs="?", metavar="ID", help="anomaly id (an evidence record's id)")
    p.add_argument("--evidence", type=Path, metavar="FILE",
                   help="read the evidence record from a JSON file instead of the topic")
    p.add_argument("--key", help="the key (topic-partition) to investigate, without an id")
    p.add_argument("--offset", type=int, action="append", default=[], metavar="N",
                   help="an offset in question (repeatable)")
    p.add_argument("--value", action="append", default=[], metavar="V",
                   help="a value in question (repeatable)")
    p.add_argument("--window", type=int, default=5, metavar="N",
                   help="keep offsets within N of those in question (default 5)")
    p.add_argument("--history", type=Path, metavar="FILE",
                   help="read ops from a history file (.json, .jsonl, .edn) instead of Kafka")
    add_connection(p)
    p.add_argument("--at", metavar="TIME",
                   help="the record's emitted time (from `kmon evidence`; ISO-8601 or unix "
                   "seconds): read the anomalies topic only around it (with --key: the events "
                   "topic only within --margin of it)")
    p.add_argument("--margin", default="5m", metavar="DURATION",
                   help="read op events from the earliest time the record names minus this "
                   "to the latest plus this (default 5m)")
    p.add_argument("--isolation", choices=("read_committed", "read_uncommitted"),
                   default=env("KMON_ISOLATION", "read_committed"),
                   help="the consumers' isolation level, which decides what is allowed")
    from kmon.cli.check import add_share_flags

    add_share_flags(p)  # the share groups' settings the checker re-runs with
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="also write a self-contained HTML page with the timeline")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def add_connection(p: argparse.ArgumentParser) -> None:
    """The flags that reach kmon's topics (shared with `kmon evidence`)."""
    env = os.environ.get
    p.add_argument("--bootstrap",
                   default=env("KMON_EVENTS_BOOTSTRAP") or env("KMON_BOOTSTRAP"),
                   help="bootstrap servers of kmon's topics (env KMON_EVENTS_BOOTSTRAP)")
    p.add_argument("--events-topic", default=env("KMON_EVENTS_TOPIC", "kmon-events"),
                   help="op events topic (env KMON_EVENTS_TOPIC; default kmon-events)")
    p.add_argument("--anomalies-topic", default=env("KMON_ANOMALIES_TOPIC", "kmon-anomalies"),
                   help="evidence topic (env KMON_ANOMALIES_TOPIC; default kmon-anomalies)")
    p.add_argument("--kafka-config", default=env("KMON_KAFKA_CONFIG"), metavar="FILE",
                   help="librdkafka properties for SASL/TLS (env KMON_KAFKA_CONFIG); SASL "
                   "credentials also from KMON_SASL_USERNAME/KMON_SASL_PASSWORD")
    p.add_argument("-X", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka client setting (repeatable)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="give up reading a topic after this long (default 120)")


def connection_config(args: argparse.Namespace) -> dict[str, Any]:
    """librdkafka settings from the connection flags (UsageError on a bad -X)."""
    from kmon.investigate.sources import client_config

    if not args.bootstrap:
        raise UsageError("no bootstrap servers: pass --bootstrap or set KMON_EVENTS_BOOTSTRAP")
    overrides = {}
    for item in args.overrides:
        k, sep, v = item.partition("=")
        if not sep:
            raise UsageError(f"-X {item!r} is not KEY=VALUE")
        overrides[k] = v
    return client_config(args.bootstrap, args.kafka_config, overrides)


def _key(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text


def run(args: argparse.Namespace) -> int:
    from kmon.investigate import investigate, page, text
    from kmon.investigate.timewindow import WindowError, parse_duration, parse_time

    _check(args)
    conf = connection_config(args) if args.bootstrap else {}
    try:
        at = parse_time(args.at, "--at") if args.at is not None else None
        margin = parse_duration(args.margin, "--margin")
    except WindowError as e:
        raise UsageError(str(e)) from e
    evidence, emitted = _evidence(args, conf, at)
    inv = _guarded(lambda: _investigate(args, conf, evidence, _ops_window(
        evidence, emitted, at, margin), investigate))
    if not inv.key_ops:
        print(f"kmon investigate: no ops of key {evidence.key} in {inv.source}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(text.to_json(inv), indent=1))
    else:
        sys.stdout.write(text.render(inv))
    if args.html:
        args.html.write_text(page.render(inv))
        if not args.json:
            print(f"HTML timeline: {args.html}")
    return 0 if inv.verdict.confirmed else 1


def _check(args: argparse.Namespace) -> None:
    if (args.id or args.evidence) and args.key is not None:
        raise UsageError("give an anomaly id (or --evidence), or --key; not both")
    if not (args.id or args.evidence or args.key is not None):
        raise UsageError("give an anomaly id, --evidence FILE, or --key with --offset/--value")
    if args.key is not None and not (args.offset or args.value):
        raise UsageError("--key needs --offset and/or --value")
    from kmon.cli.check import share_settings

    share_settings(args)  # a bad share setting fails before anything is read
    needs_kafka = args.history is None or (args.id and not args.evidence)
    if needs_kafka and not args.bootstrap:
        raise UsageError("no bootstrap servers: pass --bootstrap or set KMON_EVENTS_BOOTSTRAP "
                         "(or read ops from --history and the evidence from --evidence)")


def _guarded(work: Callable[[], Any]) -> Any:
    """``work()``, its input and source errors as UsageError (exit 2)."""
    from kmon.history import HistoryError
    from kmon.investigate import EvidenceError
    from kmon.investigate.sources import SourceError

    try:
        return work()
    except (EvidenceError, HistoryError, ValueError, OSError, SourceError) as e:
        raise UsageError(str(e)) from e


def _evidence(args: argparse.Namespace, conf: dict[str, Any],
              at: float | None) -> tuple[Evidence, float | None]:
    """The evidence (from --evidence, the topic, or --key) and when it was emitted, if known."""
    from kmon.investigate import Evidence, parse_evidence
    from kmon.investigate.sources import locate_evidence

    if args.evidence:
        ev = _guarded(lambda: parse_evidence(json.loads(args.evidence.read_text())))
        detected = ev.record.get("detected_at")
        return ev, (detected / 1e9 if isinstance(detected, int) else at)
    if args.id:
        found = _guarded(lambda: locate_evidence(conf, args.anomalies_topic, args.id,
                                                 args.timeout, at=at))
        return _guarded(lambda: parse_evidence(found.record)), found.timestamp_ms / 1000
    return Evidence(None, _key(args.key), offsets=sorted(set(args.offset)),
                    values=[_key(v) for v in args.value]), at


def _ops_window(evidence: Evidence, emitted: float | None, at: float | None,
                margin: float) -> TimeWindow | None:
    """The span of Kafka timestamps to read op events over: from the earliest time the record
    names to when the record was emitted (or the latest time it names), with ``margin`` on both
    sides; around its emitted time (or --at) when it names none; None (the whole topic) when no
    time is known.

    The end is the emission because a probe may produce an op event long after the op (its
    buffer held it while the events topic was unavailable), but the monitor had read every
    event of a verdict before emitting it."""
    from kmon.investigate.evidence import wall_times
    from kmon.investigate.timewindow import around_times

    named = wall_times(evidence)
    known = [t for t in (emitted, at) if t is not None][:1]
    return around_times(named + known if named else known, margin)


def _investigate(args: argparse.Namespace, conf: dict[str, Any], evidence: Evidence,
                 window: TimeWindow | None, investigate: Callable[..., Investigation],
                 ) -> Investigation:
    from kmon.cli.check import share_settings
    from kmon.investigate.sources import ops_from_events, ops_from_history

    skipped: list[str] = []
    if args.history:
        pairs = ops_from_history(args.history)
        source = f"history file {args.history}"
    else:
        pairs = ops_from_events(conf, args.events_topic, args.timeout, skipped, window)
        source = f"topic {args.events_topic} on {args.bootstrap}"
        if window is not None:
            source += f", op events of {window.describe()}"
    return investigate(pairs, evidence, source=source, n=args.window,
                       isolation=args.isolation, skipped=skipped, share=share_settings(args))
