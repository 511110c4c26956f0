"""`kmon prometheus`: kmon's own Prometheus for the local stack (not Debian's service)."""

from __future__ import annotations

import argparse

from kmon.cli._local import add_stack_args, errors_as_usage

HELP = (
    "Run kmon's own Prometheus on 127.0.0.1:<port base + 20>, with its config, data and log "
    "under KMON_HOME/prometheus. `up` on a running instance rewrites the config and reloads it."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prometheus", help="run the local Prometheus", description=HELP)
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    up = verbs.add_parser("up", help="start (or reload) Prometheus and wait until it is ready")
    add_stack_args(up)
    up.add_argument(
        "--target", dest="targets", action="append", default=[], metavar="JOB=HOST:PORT",
        help="an extra scrape target (repeatable); Prometheus always scrapes itself",
    )
    up.add_argument(
        "--rules", dest="rule_files", action="append", default=[], metavar="FILE",
        help="a rule file to load (repeatable)",
    )
    up.add_argument("--scrape-interval", default="5s", help="scrape interval (default 5s)")
    for verb, text in [("down", "stop Prometheus"), ("status", "is it running, where")]:
        add_stack_args(verbs.add_parser(verb, help=text))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmon.local.prometheus import LocalPrometheus, parse_targets

    with errors_as_usage():
        if args.verb == "up":
            prom = LocalPrometheus(
                home=args.home, port_base=args.port_base, targets=parse_targets(args.targets),
                rule_files=args.rule_files, scrape_interval=args.scrape_interval,
            )
            prom.up()
            print(f"prometheus: {prom.status()}; config {prom.config_path}")
            return 0
        prom = LocalPrometheus(home=args.home, port_base=args.port_base)
        if args.verb == "down":
            prom.down()
            print("prometheus: stopped")
            return 0
        state = prom.status()
        print(f"prometheus: {state}")
        return 0 if state.startswith("running") else 1
