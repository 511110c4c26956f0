"""`kmon run`: run the local stack in the foreground until Ctrl-C, then stop it cleanly.

The stack: the local Kafka cluster, the probe writing op events, the monitor checking them, and
Prometheus scraping both with kmon's alert rules loaded (see ``kmon.local.stack``); Toxiproxy in
front of the brokers when installed, for ``kmon nemesis net``.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time
from types import FrameType
from typing import TYPE_CHECKING

from kmon.cli._local import add_kafka_args, add_stack_args, errors_as_usage, overrides_from_args

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.stack import LocalStack

HELP = (
    "Run the local stack in the foreground: bring the Kafka cluster up (see `kmon cluster up`), "
    "start the probe, the monitor and Prometheus (with kmon's alert rules), report broker state "
    "changes and components that die, and stop everything it started on Ctrl-C or SIGTERM."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the local stack until interrupted", description=HELP)
    add_stack_args(p)
    add_kafka_args(p)
    p.add_argument("--timeout", type=float, default=180.0,
                   help="seconds to wait for the cluster to come up (default 180)")
    p.add_argument("--no-probe", action="store_true", help="do not run the probe")
    p.add_argument("--no-monitor", action="store_true", help="do not run the monitor")
    p.add_argument("--no-prometheus", action="store_true", help="do not run Prometheus")
    p.add_argument("--probe-set", action="append", default=[], metavar="NAME=VALUE",
                   help="a probe setting (see `kmon probe --help-settings`; repeatable)")
    p.add_argument("--monitor-set", action="append", default=[], metavar="NAME=VALUE",
                   help="a monitor setting (see `kmon monitor --help`; repeatable)")
    p.set_defaults(func=run)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from kmon.local.cluster import LocalCluster
    from kmon.local.stack import LocalStack, StackOptions
    from kmon.local.toxiproxy import LocalToxiproxy, find_binary

    # SIGTERM (a supervisor, `kill`) and SIGHUP (the terminal went away) stop the stack the
    # same way Ctrl-C does; SIGINT explicitly, since a shell starts background jobs with it
    # ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    with errors_as_usage():
        cluster = LocalCluster(
            home=args.home, port_base=args.port_base, overrides=overrides_from_args(args)
        )
        owned = not cluster.is_up()
        proxy = LocalToxiproxy(home=args.home, port_base=args.port_base)
        proxy_owned = not proxy.is_up() and find_binary(proxy.cache) is not None
        options = StackOptions(
            probe=not args.no_probe, monitor=not args.no_monitor,
            prometheus=not args.no_prometheus,
            probe_args=[a for kv in args.probe_set for a in ("--set", kv)],
            monitor_args=[a for kv in args.monitor_set for a in ("--set", kv)],
        )
        stack = LocalStack(cluster, options, home=args.home, port_base=args.port_base)
        try:
            started = time.monotonic()
            cluster.up(timeout=args.timeout)
            _say(f"kafka: 3 brokers up in {time.monotonic() - started:.1f}s, "
                 f"bootstrap {cluster.bootstrap}")
            _say(f"kafka: logs in {cluster.root}/broker-N/server.log")
            if not owned:
                _say("kafka: the cluster was already running; it stays up after this run")
            # Toxiproxy in front of the brokers, for `kmon nemesis net ...` (clients that
            # bootstrap through it; everyone else is unaffected).
            if find_binary(proxy.cache) is None:
                _say("toxiproxy: not installed (make setup); network faults unavailable")
            else:
                proxy.up()
                _say(f"toxiproxy: proxied bootstrap {cluster.proxied_bootstrap}")
            stack.start(_say)
            _say("running; Ctrl-C stops")
            _watch(cluster, stack)
        except KeyboardInterrupt:
            pass
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)  # nothing may cut the shutdown short
            stack.stop(_say)
            if proxy_owned:
                proxy.down()
            if owned:
                _say("\nstopping the cluster ...")
                cluster.down()
                _say("stopped")
    return 0


def _say(line: str) -> None:
    """Print, but never let a closed stdout (a pipe whose reader quit) skip the shutdown."""
    with contextlib.suppress(OSError):
        print(line, flush=True)


def _watch(cluster: LocalCluster, stack: LocalStack) -> None:
    """Report each change of a broker's state (a crash, or a fault injected from elsewhere)
    and each component that exits on its own."""
    last = {s.node_id: s.state for s in cluster.status()}
    reported: set[str] = set()
    while True:
        time.sleep(2.0)
        for s in cluster.status():
            if s.state != last[s.node_id]:
                _say(f"kafka: broker {s.node_id} is now {s.state}")
                last[s.node_id] = s.state
        for child in stack.dead_children():
            if child.name not in reported:
                reported.add(child.name)
                _say(f"{child.name}: exited with status {child.proc.returncode}; "
                     f"see {child.log}")
