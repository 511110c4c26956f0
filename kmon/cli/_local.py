"""Arguments shared by the subcommands that drive the local stack (not a subcommand itself)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from kmon.cli import UsageError
from kmon.env import SettingError


def add_stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--home", metavar="DIR",
        help="state directory of the local stack (env KMON_HOME; default <repo>/var)",
    )
    p.add_argument(
        "--port-base", type=int, metavar="PORT",
        help="first port of the local stack (env KMON_PORT_BASE; default 19092)",
    )


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a broker setting, e.g. --set min.insync.replicas=3 (repeatable)",
    )
    p.add_argument(
        "--config-file", type=Path, metavar="FILE",
        help="broker settings overrides in .properties form (--set wins over the file)",
    )


def overrides_from_args(args: argparse.Namespace) -> dict[str, str]:
    from kmon.local.kafka_config import parse_overrides, read_properties

    merged = read_properties(args.config_file) if args.config_file else {}
    merged.update(parse_overrides(args.overrides))
    return merged


@contextlib.contextmanager
def errors_as_usage() -> Iterator[None]:
    """Bad settings become usage errors (exit 2); failures of the stack itself exit 1."""
    from kmon.local.cluster import ClusterError
    from kmon.local.prometheus import PrometheusError
    from kmon.local.tansu import TansuError

    try:
        yield
    except SettingError as exc:
        raise UsageError(str(exc)) from exc
    except (ClusterError, PrometheusError, TansuError) as exc:
        raise SystemExit(f"kmon: {exc}") from exc


# What `kmon probe` and `kmon monitor` fall back to when no bootstrap is given, for --help.
LOCAL_CLUSTER_HELP = "the local stack's cluster (`kmon cluster up`, at KMON_PORT_BASE)"


def local_bootstrap() -> str:
    """The local stack's ``bootstrap.servers``: what a bare `kmon probe`/`kmon monitor` uses."""
    from kmon import env
    from kmon.local.ports import Ports

    return Ports(env.port_base()).bootstrap
