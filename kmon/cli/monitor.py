"""`kmon monitor`: Run the Spark Structured Streaming monitor over the op events topic.

Reads op events, checks them with the checker core (per key, then per transaction), sends
evidence to the anomalies topic, malformed events to the dead-letter topic, and serves
Prometheus metrics. Settings come from --config (YAML), the flags and --set, in increasing
precedence; `--help-settings` lists them. Without --bootstrap-servers and --checkpoint it
monitors the local cluster (`kmon cluster up`) with a checkpoint under KMON_HOME. The same
settings run it under spark-submit: see docs/monitor.md. SIGTERM or Ctrl-C stops it.
"""

from __future__ import annotations

import argparse

from kmon.cli import UsageError

SUMMARY = "Run the Spark Structured Streaming monitor over the op events topic."


def register(sub: argparse._SubParsersAction) -> None:
    from kmon.cli._local import LOCAL_CLUSTER_HELP
    from kmon.streaming.main import add_arguments

    p = sub.add_parser("monitor", help=SUMMARY, description=__doc__.split(": ", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, local_default=LOCAL_CLUSTER_HELP)
    p.set_defaults(func=run)


def _local_defaults() -> dict[str, str]:
    """The local stack's cluster and a checkpoint under KMON_HOME, for a bare `kmon monitor`."""
    from kmon import env
    from kmon.cli._local import local_bootstrap

    return {"kafka.bootstrap.servers": local_bootstrap(),
            "checkpoint": str(env.kmon_home() / "monitor" / "checkpoint")}


def run(args: argparse.Namespace) -> int:
    import logging

    from kmon.env import SettingError
    from kmon.streaming import main
    from kmon.streaming.config import ConfigError

    if args.help_settings:
        print(main.settings_help())
        return 0
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:  # main.run too: a setting found bad at start (the metrics port in use)
        return main.run(main.load_config(args, defaults=_local_defaults()))
    except (ConfigError, SettingError) as e:
        raise UsageError(str(e)) from None
