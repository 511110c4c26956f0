"""`kmon cluster`: manage the local 3-broker KRaft Kafka cluster and inject process faults."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from kmon.cli._local import add_kafka_args, add_stack_args, errors_as_usage, overrides_from_args
from kmon.env import SettingError

if TYPE_CHECKING:  # the CLI imports the harness only when a verb runs
    from kmon.local.cluster import LocalCluster

HELP = (
    "Manage the local Kafka cluster: three combined broker+controller nodes (KRaft) on "
    "127.0.0.1, state under KMON_HOME/kafka, ports from KMON_PORT_BASE. Fault verbs act on "
    "one node by id (1, 2 or 3). With --broker tansu, the same verbs manage one tansu broker "
    "(a third-party Kafka-compatible broker, node 1; `make tansu` builds it) under "
    "KMON_HOME/tansu."
)
BROKERS = ("kafka", "tansu")


def _add_broker_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker", choices=BROKERS, default="kafka",
                   help="which broker: the Apache Kafka cluster (default) or tansu")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="manage the local 3-broker Kafka cluster", description=HELP)
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    up = verbs.add_parser(
        "up", help="start the cluster and wait until it takes acks=all writes",
        description="Start whatever is not running (idempotent) and wait until all three "
        "brokers are registered and an RF=3 topic accepts an acks=all write.",
    )
    add_stack_args(up)
    add_kafka_args(up)
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait (default 180)")
    up.add_argument("--storage", choices=_storages(), default=None,
                    help="tansu's storage engine (default: the one it last ran with, else "
                    "memory)")
    up.add_argument("--pg-schema", default=None, metavar="SQL",
                    help="tansu's PostgreSQL schema for --storage postgres, applied when its "
                    "database is first made (default: $KMON_TANSU_PG_SCHEMA)")

    down = verbs.add_parser("down", help="stop every node; no process is left behind")
    add_stack_args(down)

    status = verbs.add_parser(
        "status", help="state, pid, port and log of each node (exit 1 unless all run)"
    )
    add_stack_args(status)
    for v in (up, down, status):
        _add_broker_arg(v)

    for verb, text in [
        ("pause", "SIGSTOP node N"),
        ("resume", "SIGCONT node N"),
        ("kill", "SIGKILL node N (no shutdown)"),
        ("start", "start node N again with its config and data; waits until registered"),
    ]:
        v = verbs.add_parser(verb, help=text, description=text + ".")
        add_stack_args(v)
        _add_broker_arg(v)
        v.add_argument("node", type=int, metavar="N", help="node id: 1, 2 or 3 (tansu: 1)")
        if verb == "start":
            v.add_argument("--no-wait", dest="wait", action="store_false",
                           help="return once the process is started")

    logs = verbs.add_parser(
        "logs", help="paths of the node logs, or the end of node N's log",
        description="Without N: print each node's log path. With N: print the end of its log.",
    )
    add_stack_args(logs)
    _add_broker_arg(logs)
    logs.add_argument("node", type=int, nargs="?", metavar="N", help="node id: 1, 2 or 3")
    logs.add_argument("-n", "--lines", type=int, default=50, help="lines to show (default 50)")
    logs.add_argument("--path", action="store_true", help="print only the path of N's log")
    p.set_defaults(func=run)


def _storages() -> tuple[str, ...]:
    from kmon.local.tansu import STORAGES

    return STORAGES


def run(args: argparse.Namespace) -> int:
    from kmon.local.cluster import LocalCluster

    if getattr(args, "broker", "kafka") == "tansu":
        return _tansu(args)
    with errors_as_usage():
        for option in ("storage", "pg_schema"):
            if getattr(args, option, None) is not None:
                raise SettingError(f"--{option.replace('_', '-')}: only with --broker tansu")
        overrides = overrides_from_args(args) if args.verb == "up" else {}
        cluster = LocalCluster(home=args.home, port_base=args.port_base, overrides=overrides)
        return _VERBS[args.verb](cluster, args)


def _up(cluster: LocalCluster, args: argparse.Namespace) -> int:
    started = time.monotonic()
    cluster.up(timeout=args.timeout)
    print(f"cluster up in {time.monotonic() - started:.1f}s; bootstrap: {cluster.bootstrap}")
    _print_status(cluster)
    return 0


def _down(cluster: LocalCluster, args: argparse.Namespace) -> int:
    started = time.monotonic()
    cluster.down()
    print(f"cluster down in {time.monotonic() - started:.1f}s")
    return 0


def _status(cluster: LocalCluster, args: argparse.Namespace) -> int:
    print(f"home: {cluster.root}  bootstrap: {cluster.bootstrap}")
    if cluster.sasl_ssl_listener:
        print(f"sasl_ssl bootstrap: {cluster.sasl_ssl_bootstrap}  "
              f"(SCRAM-SHA-512, CA {cluster.ca_path})")
    return 0 if _print_status(cluster) else 1


def _fault(cluster: LocalCluster, args: argparse.Namespace) -> int:
    if args.verb == "start":
        pid = cluster.start(args.node, wait=args.wait)
    else:
        pid = getattr(cluster, args.verb)(args.node)
    print(f"broker {args.node} (pid {pid}): {args.verb}")
    return 0


def _logs(cluster: LocalCluster, args: argparse.Namespace) -> int:
    from kmon.local.procs import tail

    if args.node is None:
        for s in cluster.status():
            print(f"broker {s.node_id}: {s.log}")
        return 0
    path = cluster.log_path(args.node)
    print(path if args.path else tail(path, args.lines))
    return 0


def _print_status(cluster: LocalCluster) -> bool:
    rows = cluster.status()
    print(f"{'node':<5} {'state':<8} {'pid':>8} {'port':>6}  log")
    for s in rows:
        print(f"{s.node_id:<5} {s.state:<8} {s.pid or '-':>8} {s.port:>6}  {s.log}")
    return all(s.state == "running" for s in rows)


def _tansu(args: argparse.Namespace) -> int:
    """The verbs for one tansu broker: up (--storage), down, status, pause, resume, kill and
    start (node 1; start restarts it with the engine it last ran with)."""
    from kmon.local.tansu import LocalTansu

    with errors_as_usage():
        if getattr(args, "node", 1) != 1:
            raise SettingError(f"--broker tansu: one node, 1 (not {args.node})")
        last = LocalTansu(args.home, args.port_base).last_storage()
        storage = getattr(args, "storage", None) or last or "memory"
        t = LocalTansu(args.home, args.port_base, storage,
                       pg_schema=getattr(args, "pg_schema", None))
        if args.verb in ("up", "start"):
            pid = t.up(timeout=getattr(args, "timeout", 60.0))
            print(f"tansu up (pid {pid}, storage {storage}); bootstrap: {t.bootstrap}")
        elif args.verb == "down":
            t.down()
            print("tansu down")
        elif args.verb == "status":
            st = t.status()
            print(f"tansu {st.state} pid {st.pid or '-'} port {st.port} storage "
                  f"{st.storage or '-'} log {st.log}")
            return 0 if st.state == "running" else 1
        elif args.verb == "logs":
            from kmon.local.procs import tail

            print(t.log_path if args.path else tail(t.log_path, args.lines))
        else:
            pid = getattr(t, args.verb)()
            print(f"tansu (pid {pid}): {args.verb}")
    return 0


_VERBS = {
    "up": _up, "down": _down, "status": _status, "logs": _logs,
    "pause": _fault, "resume": _fault, "kill": _fault, "start": _fault,
}
