"""Run the monitor: ``kmon monitor`` locally, or this file under ``spark-submit``.

::

    kmon pack -o kmon-env.tar.gz    # kmon for executors without it (docs/monitor.md)
    KAFKA=org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0
    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python \\
    spark-submit --master spark://host:7077 --packages "$KAFKA" \\
      --archives kmon-env.tar.gz#environment \\
      "$(python -c 'import kmon.streaming.main as m; print(m.__file__)')" --config monitor.yaml

Settings: ``--config`` (YAML) then ``--set key=value`` (see ``config.KEYS``), and the flags
below for the common ones. Any bad setting stops it before Spark starts, naming the key.
SIGTERM or Ctrl-C stops both queries (a micro-batch in flight is redone on the next start).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kmon.streaming import config

log = logging.getLogger("kmon.monitor")

_FLAGS = {
    "bootstrap_servers": "kafka.bootstrap.servers",
    "events_topic": "topics.events",
    "checkpoint": "checkpoint",
    "metrics_port": "metrics.port",
    "master": "spark.master",
}


def add_arguments(p: argparse.ArgumentParser, local_default: str = "") -> None:
    """The monitor's flags; ``local_default`` says what a bare ``-b`` falls back to."""
    p.add_argument("--config", metavar="FILE",
                   help=f"YAML settings file (default: ${config.ENV_CONFIG})")
    p.add_argument("--bootstrap-servers", "-b", metavar="HOSTS",
                   help="cluster holding the topics (kafka.bootstrap.servers"
                        f"{'; default: ' + local_default if local_default else ''})")
    p.add_argument("--events-topic", metavar="TOPIC", help="op events topic (topics.events)")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="checkpoint location: a path, or hdfs:// s3a:// ... (checkpoint)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="Prometheus endpoint port, 0 for none (metrics.port, default 9464)")
    p.add_argument("--master", metavar="URL",
                   help="Spark master when not under spark-submit (spark.master)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="any setting, e.g. --set grace=30s --set "
                        "source.kafka.security.protocol=SASL_SSL (repeatable)")
    p.add_argument("--help-settings", action="store_true", help="list every setting and exit")
    p.add_argument("--log-level", default="INFO", help="log level (default INFO)")


def settings_help() -> str:
    lines = []
    for key, (default, meaning) in config.KEYS.items():
        shown = "(required)" if key in config.REQUIRED else ("-" if default is None else default)
        lines.append(f"{key:26} {shown!s:>14}  {meaning}")
    lines += [f"{p + '*':26} {'':>14}  {meaning}" for p, meaning in config.PREFIXES.items()]
    lines.append("Values may name ${env:NAME} (an environment variable) and ${file:PATH} (a "
                 "file's text), resolved at start.")
    return "\n".join(lines)


def load_config(args: argparse.Namespace, defaults: dict[str, Any] | None = None
                ) -> config.MonitorConfig:
    """The configuration from ``args`` (file, flags, --set), over ``defaults``."""
    values: dict[str, Any] = dict(defaults or {})
    path = args.config or os.environ.get(config.ENV_CONFIG)
    if path:
        values.update(config.read_file(Path(path)))
    for attr, key in _FLAGS.items():
        v = getattr(args, attr, None)
        if v is not None:
            values[key] = v
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise config.ConfigError(f"--set {item!r}: expected key=value")
        values[key.strip()] = value.strip()
    return config.from_mapping(values)


# A query that dies on something other than data (a Python worker that could not connect
# under load, a Kafka outage) is restarted in-process from the checkpoint; repeated failures
# end the process (exit 1) so that a supervisor (Kubernetes) sees them.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0


def run(cfg: config.MonitorConfig, stop: threading.Event | None = None) -> int:
    """Start the monitor and block until ``stop`` is set, a signal, or queries keep failing."""
    from kmon import metrics_port
    from kmon.streaming.kafka import check_replication
    from kmon.streaming.monitor import Monitor
    from kmon.streaming.session import build_spark_session

    # Before Spark (tens of seconds) and the topics: a taken port fails at once.
    if problem := metrics_port.bind_problem(cfg.metrics_port, cfg.metrics_host):
        raise config.ConfigError(problem)
    check_replication(cfg)  # before Spark too: more replicas than brokers fails at once
    stop = stop or threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    spark_conf = {f"spark.{k}": v for k, v in cfg.spark_conf.items()}
    spark = build_spark_session("kmon-monitor", master=spark_conf.pop("spark.master", None),
                                conf=spark_conf)
    spark.sparkContext.setLogLevel("WARN")

    def start() -> Any:
        monitor = Monitor(cfg, spark, stop=stop)
        monitor.start()
        log.info("monitoring %s; metrics on %s:%s; checkpoint %s; partitions: %d in stage 1, "
                 "%d in stage 2", cfg.events_topic, cfg.metrics_host, cfg.metrics_port,
                 cfg.checkpoint, monitor.state_partitions, monitor.txn_partitions)
        return monitor

    return supervise(start, stop)


def supervise(start: Callable[[], Any], stop: threading.Event,
              backoff: Callable[[int], float] = lambda n: min(60.0, 2.0 ** n)) -> int:
    """Run ``start()``'s monitor until ``stop``; restart it when a query fails, at most
    ``MAX_RESTARTS`` times in ``RESTART_WINDOW_S``. Returns the exit status."""
    monitor = start()
    restarts: list[float] = []
    try:
        while not stop.is_set():
            try:
                if not monitor.await_termination(timeout=1.0):
                    continue
                error = "a query stopped on its own"
            except Exception as e:  # the query's error, re-raised by awaitTermination
                error = (str(e).strip().splitlines() or [type(e).__name__])[0]
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW_S]
            if len(restarts) >= MAX_RESTARTS:
                log.error("%s; %d restarts in %.0f s already: giving up", error,
                          len(restarts), RESTART_WINDOW_S)
                return 1
            restarts.append(now)
            log.error("%s; restarting both queries from the checkpoint (restart %d)", error,
                      len(restarts))
            monitor.stop()
            if stop.wait(backoff(len(restarts))):
                return 0
            monitor = start()
        return 0
    finally:
        monitor.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kmon-monitor", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    if args.help_settings:
        print(settings_help())
        return 0
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args)
        return run(cfg)
    except config.ConfigError as e:  # also one found at start, e.g. a checkpoint's layout
        print(f"kmon monitor: error: {e}", file=sys.stderr)
        return 2
    except InterruptedError:  # stopped while waiting for the events topic
        return 0


if __name__ == "__main__":
    sys.exit(main())
