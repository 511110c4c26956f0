"""`kmon dashboards`: Generate Grafana dashboards and alert rules, or push them to Grafana."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kmon.cli import UsageError

SUMMARY = "Generate Grafana dashboards and alert rules, or push them to Grafana."


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboards", help=SUMMARY, description=SUMMARY)
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    gen = verbs.add_parser(
        "generate", help="write the dashboards' JSON and the rule files",
        description="Write dashboards/generated/ (dashboards JSON, Prometheus rules and "
        "Grafana alert rules for each consumer isolation level) and the chart's copies in "
        "helm/kmon/files/. With --check, write nothing and exit 1 if any file is stale.",
    )
    gen.add_argument("--out", type=Path, metavar="DIR",
                     help="output folder (default: the package's generated/)")
    gen.add_argument("--chart", type=Path, metavar="DIR",
                     help="Helm chart to copy rules and dashboards into "
                     "(default: helm/kmon of this checkout, if there is one)")
    gen.add_argument("--datasource-uid", default=None,
                     help="Prometheus data source uid in the Grafana alert rule files "
                     "(default: prometheus)")
    gen.add_argument("--check", action="store_true",
                     help="only compare: exit 1 naming the files that differ")

    push = verbs.add_parser(
        "push", help="upsert the dashboards and Grafana-managed alert rules into Grafana",
        description="Create or update kmon's folder, dashboards and alert rules in a Grafana. "
        "Authenticate with a service account token (--token or GRAFANA_TOKEN) or basic auth "
        "(--user/--password, GRAFANA_USER/GRAFANA_PASSWORD, or user:password@ in the URL).",
    )
    push.add_argument("--url", default=os.environ.get("GRAFANA_URL"),
                      help="Grafana's base URL (env GRAFANA_URL)")
    push.add_argument("--token", default=os.environ.get("GRAFANA_TOKEN"),
                      help="service account token (env GRAFANA_TOKEN)")
    push.add_argument("--user", default=os.environ.get("GRAFANA_USER"),
                      help="basic auth user (env GRAFANA_USER)")
    push.add_argument("--password", default=os.environ.get("GRAFANA_PASSWORD"),
                      help="basic auth password (env GRAFANA_PASSWORD)")
    push.add_argument("--folder-uid", default="kmon", help="folder uid (default kmon)")
    push.add_argument("--folder-title", default="kmon", help="folder title (default kmon)")
    push.add_argument("--datasource-uid", default=None,
                      help="Prometheus data source the alert rules query "
                      "(default: Grafana's default Prometheus data source)")
    push.add_argument("--isolation", choices=("read_committed", "read_uncommitted"),
                      default="read_committed",
                      help="the consumers' isolation level, which decides what pages")
    push.add_argument("--no-alerts", dest="alerts", action="store_false",
                      help="push the dashboards only")

    tools = verbs.add_parser(
        "install-tools", help="install helm, kubeconform, CRD schemas, chromium (set-up)",
        description="Set-up for the operations tests: go install pinned helm and kubeconform "
        "into $KMON_CACHE/bin, convert the prometheus-operator CRD schemas for kubeconform, "
        "apt-get install chromium. Idempotent; instant when warm.",
    )
    tools.add_argument("--no-apt", dest="apt", action="store_false",
                       help="do not apt-get install missing Debian packages")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.verb == "generate":
        return _generate(args)
    if args.verb == "push":
        return _push(args)
    from kmon.dashboards import tools

    tools.install(apt=args.apt)
    return 0


def _generate(args: argparse.Namespace) -> int:
    from kmon import env
    from kmon.dashboards import generate, rules

    chart = args.chart
    if chart is None and (root := env.repo_root()) is not None and (root / "helm/kmon").is_dir():
        chart = root / "helm" / "kmon"
    files = generate.all_files(args.out or generate.GENERATED, chart,
                               args.datasource_uid or rules.DATASOURCE_UID)
    if args.check:
        stale = generate.stale(files)
        for path in stale:
            print(f"stale: {path}", file=sys.stderr)
        if stale:
            print("run `kmon dashboards generate` and commit the result", file=sys.stderr)
        return 1 if stale else 0
    changed = generate.write(files)
    for path in files:
        print(f"{'wrote' if path in changed else 'unchanged'}: {path}")
    return 0


def _push(args: argparse.Namespace) -> int:
    from grafana_client.client import GrafanaException

    from kmon.dashboards import push

    if not args.url:
        raise UsageError("no Grafana URL: pass --url or set GRAFANA_URL")
    if args.user and not args.password:
        raise UsageError("--user needs --password (or GRAFANA_PASSWORD)")
    api = push.connect(args.url, token=args.token, user=args.user, password=args.password)
    try:
        result = push.push(api, folder_uid=args.folder_uid, folder_title=args.folder_title,
                           datasource_uid=args.datasource_uid, isolation=args.isolation,
                           alerts=args.alerts)
    except (push.PushError, GrafanaException) as e:
        raise SystemExit(f"kmon dashboards push: {e}") from e
    except OSError as e:  # connection refused, DNS, TLS
        raise SystemExit(f"kmon dashboards push: cannot reach {args.url}: {e}") from e
    for url in result.dashboards:
        print(f"dashboard: {url}")
    if args.alerts:
        print(f"alert rules: {len(result.created_rules)} created, "
              f"{len(result.updated_rules)} updated in {len(result.groups)} groups "
              f"(folder {result.folder_uid}, data source {result.datasource_uid})")
    return 0
