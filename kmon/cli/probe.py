"""`kmon probe`: Run the continuous Jepsen-style probe workload against a cluster.

Every op goes to the events topic as an Avro op event (and, with --history, to a .jsonl file
that `kmon check` reads). Settings come from --config (YAML), KMON_PROBE_* environment variables
and flags, in increasing precedence; `--help-settings` lists them all. Without a bootstrap
(-b, the file or KMON_PROBE_KAFKA_BOOTSTRAP_SERVERS) it probes the local cluster (`kmon cluster
up`), as a bare `kmon monitor` monitors it. SIGTERM or Ctrl-C stops
it cleanly: in-flight ops finish (or are reported info), a final catch-up read runs, events are
flushed, and a JSON summary is printed on stdout.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import signal
import sys
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from kmon.cli import UsageError
from kmon.cli._local import LOCAL_CLUSTER_HELP, local_bootstrap
from kmon.env import SettingError

SUMMARY = "Run the continuous Jepsen-style probe workload against a cluster."

# flag -> setting name
_FLAG_SETTINGS = {
    "bootstrap_servers": "kafka.bootstrap.servers",
    "name": "name",
    "processes": "processes",
    "rate": "rate",
    "duration": "duration",
    "history": "history",
    "events_topic": "events.topic",
    "metrics_port": "metrics.port",
    "seed": "seed",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help=SUMMARY, description=__doc__.split(": ", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, metavar="FILE", help="YAML settings file")
    p.add_argument("--bootstrap-servers", "-b", metavar="HOSTS",
                   help=f"the cluster to probe (kafka.bootstrap.servers; default: "
                        f"{LOCAL_CLUSTER_HELP})")
    p.add_argument("--name", help="probe name (default: host name)")
    p.add_argument("--processes", type=int, metavar="N", help="logical processes (default 4)")
    p.add_argument("--rate", type=float, metavar="OPS", help="target ops/s (default 50)")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="stop after this long (default 0: run until SIGTERM)")
    p.add_argument("--history", metavar="FILE", help="also write the history as .jsonl")
    p.add_argument("--events-topic", metavar="TOPIC", help="op events topic (default kmon-events)")
    p.add_argument("--no-events", dest="events", action="store_false",
                   help="do not emit op events (needs --history)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="Prometheus metrics port (default 9465; 0: none)")
    p.add_argument("--seed", help="random seed for op choices")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="any setting, e.g. --set txn_share=0.5 --set "
                        "consumer.isolation.level=read_uncommitted (repeatable)")
    p.add_argument("--help-settings", action="store_true", help="list every setting and exit")
    p.add_argument("--check", action="store_true",
                   help="only check that the probed and the events clusters answer a metadata "
                        "request with these settings (security included), then exit: 0 if "
                        "both do, 1 naming the one that does not (the chart's `helm test`)")
    p.add_argument("--log-level", default="INFO", help="log level (default INFO)")
    p.set_defaults(func=run)


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in args.overrides:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value
    for attr, setting in _FLAG_SETTINGS.items():
        value = getattr(args, attr, None)
        if value is not None:
            out[setting] = value
    if args.events is False:
        out["events.enabled"] = False
    return out


def run(args: argparse.Namespace) -> int:
    from kmon.probes import config as probe_config

    if args.help_settings:
        print(probe_config.help_text())
        return 0
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # librdkafka logs every refused connection while a broker is down; its errors are counted
    # in kmon_probe_client_errors_total instead. --log-level DEBUG shows them all.
    level = logging.getLevelName(args.log_level.upper())
    logging.getLogger("kmon.probes.librdkafka").setLevel(
        level if level == logging.DEBUG else logging.CRITICAL)
    try:  # lowest precedence: any bootstrap in the file or environment wins
        cfg = probe_config.load(args.config, overrides=overrides_from_args(args),
                                defaults={"kafka.bootstrap.servers": local_bootstrap()})
    except SettingError as e:  # a ConfigError, or a bad KMON_PORT_BASE
        raise UsageError(str(e)) from e
    if args.check:
        from kmon.cli.probe_check import check

        return check(cfg)
    return _run(cfg)


def _serve_metrics(cfg: Any) -> Any:
    """The probe's metrics, served before anything else starts (a taken port fails fast)."""
    from kmon import metrics_port
    from kmon.probes.clients import identity
    from kmon.probes.metrics import ProbeMetrics

    metrics = ProbeMetrics(identity=identity(cfg))
    try:
        metrics.serve(cfg.metrics_port, cfg.metrics_addr)
    except OSError as e:
        raise UsageError(metrics_port.problem(cfg.metrics_port, cfg.metrics_addr, e)) from None
    return metrics


def _run(cfg: Any) -> int:
    from kmon.probes.config import ConfigError
    from kmon.probes.stacks import enable_stack_dumps
    from kmon.probes.workload import Workload

    # A crash in the native client (librdkafka) prints every Python thread's stack to stderr
    # (when stderr is a file: not when the probe is called in-process with stderr captured);
    # so does SIGUSR1, for a probe that hangs with the GIL held in a native call (its metrics
    # stop answering, SIGTERM does nothing): `kill -USR1` shows where before the kill.
    with suppress(io.UnsupportedOperation, ValueError, RuntimeError):
        enable_stack_dumps()
    metrics = _serve_metrics(cfg)
    with ExitStack() as stack:
        history = None
        if cfg.history:
            history = stack.enter_context(open(cfg.history, "w", encoding="utf-8"))
        wl = Workload(cfg, metrics, history)
        try:
            wl.start()
        except ConfigError as e:
            raise UsageError(str(e)) from e
        except Exception as e:
            raise SystemExit(f"kmon probe: could not start: {e}") from e
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: wl.stop())
        wl.run()
        summary = wl.shutdown()
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0
