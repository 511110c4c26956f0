"""Every dashboard query, variable and rule runs on a real Prometheus scraping kmon's metrics.

Prometheus is kmon's own (``kmon.local.prometheus``, Debian's binary) with the generated rules
loaded. By default it scrapes ``ops_exporter``: the metrics contract of docs/metrics.md served by
prometheus_client. To run the same checks against a real probe and monitor, set
``KMON_OPS_TARGETS=kmon-monitor=HOST:PORT,kmon-probe=HOST:PORT``.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from kmon.dashboards import generate, layout, queries, rules, tools
from kmon.dashboards.grafana import expressions
from kmon.local.prometheus import LocalPrometheus
from tests.helpers import missing_tool, wait_until
from tests.integration import ops_exporter
from tests.integration.promapi import Prom, dashboard_queries, substitute


def _free_port_base() -> int:
    """A port base whose Prometheus port (base + 20) is free: this test's own stack."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = port - 20
    return base if 1024 <= base <= 65435 else _free_port_base()


@contextmanager
def _targets() -> Iterator[dict[str, list[str]]]:
    raw = os.environ.get("KMON_OPS_TARGETS")
    if raw:
        out: dict[str, list[str]] = {}
        for item in raw.split(","):
            job, _, target = item.partition("=")
            out.setdefault(job, []).append(target)
        yield out
        return
    with ops_exporter.serve() as ports:
        yield {
            rules.MONITOR_JOB: [f"127.0.0.1:{ports['monitor']}"],
            rules.PROBE_JOB: [f"127.0.0.1:{ports['probe']}"],
        }


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    if tools.find("prometheus") is None or tools.find("promtool") is None:
        missing_tool("prometheus/promtool", "`make setup` installs them")
    rule_file = generate.rules_file("read_committed")
    with ExitStack() as stack:
        targets = stack.enter_context(_targets())
        local = LocalPrometheus(
            home=tmp_path_factory.mktemp("ops-prom"), port_base=_free_port_base(),
            targets=targets, rule_files=[rule_file], scrape_interval="1s",
        )
        local.up()
        stack.callback(local.down)
        p = Prom(local.url)

        wait_until(lambda: set(targets) <= p.jobs_up(), "Prometheus scrapes every kmon target",
                   timeout=60)
        yield p


def _returns_series(p: Prom, expr: str) -> bool:
    return len(p.series_of(expr)) > 0


DASHBOARD_QUERIES = [pytest.param(uid, title, expr, id=f"{uid}:{title}")
                     for uid, title, expr in dashboard_queries()]


@pytest.mark.parametrize(("uid", "title", "expr"), DASHBOARD_QUERIES)
def test_dashboard_query_parses_and_returns_series(
    prom: Prom, uid: str, title: str, expr: str
) -> None:
    promql = substitute(expr)
    # Rates need two scrapes, recorded series one rule evaluation: wait for data, then it
    # must be there (a query that never returns series fails after the bound).
    wait_until(lambda: _returns_series(prom, promql), f"{uid} / {title}: {promql}", timeout=90)


def test_every_panel_query_is_in_a_dashboard() -> None:
    """The query tables hold nothing a dashboard does not draw (dead queries go untested)."""
    drawn = {expr for _, build in layout.DASHBOARDS.items() for _, expr in expressions(build())}
    tables = (queries.OVERVIEW, queries.DRILLDOWN, queries.ANNOTATIONS)
    assert {e for table in tables for e in table.values()} == drawn


@pytest.mark.parametrize(("name", "query"), sorted(queries.VARIABLES.items()))
def test_template_variable_has_values(prom: Prom, name: str, query: str) -> None:
    m = re.fullmatch(r"label_values\((?P<match>.+), (?P<label>\w+)\)", query)
    assert m, query
    values = prom.get(f"/api/v1/label/{m['label']}/values", **{"match[]": substitute(m["match"])})
    assert values["status"] == "success"
    if name in queries.KUBERNETES_ONLY_VARIABLES:
        return  # no Kubernetes here: "All" (.*) matches the absent label
    assert values["data"], f"variable {name} has no values"


def test_rules_are_loaded_and_evaluate_without_error(prom: Prom) -> None:
    wait_until(prom.rules_evaluated, "every rule group loaded and evaluated", timeout=60)
    assert not prom.unhealthy_rules()


@pytest.mark.parametrize("alert", [a.name for a in rules.alerts()])
def test_alert_expression_runs(prom: Prom, alert: str) -> None:
    expr = next(a.expr for a in rules.alerts() if a.name == alert)
    body = prom.query(expr)
    assert body["status"] == "success", body.get("error")


def test_a_broken_query_is_caught(prom: Prom) -> None:
    """The harness itself: a misspelt metric returns nothing, a syntax error is an error."""
    assert prom.series_of("sum(rate(kmon_anomaly_total[1m]))") == []
    assert prom.query("sum(rate(kmon_anomalies_total[1m])")["status"] == "error"


def test_contract_names_are_what_the_dashboards_use() -> None:
    """Every kmon_ metric a query names is declared in docs/metrics.md (no drifted names)."""
    declared = {s.name for s in ops_exporter.contract()}
    suffixes = ("_bucket", "_sum", "_count")
    used = set()
    for expr in [*queries.OVERVIEW.values(), *queries.DRILLDOWN.values(),
                 *queries.VARIABLES.values(), *(a.expr for a in rules.alerts()),
                 *(r.expr for r in rules.recording_rules())]:
        for name in re.findall(r"(?<![:\w])kmon_[a-z_]+", expr):
            for s in suffixes:
                if name.endswith(s) and name.removesuffix(s) in declared:
                    name = name.removesuffix(s)
            used.add(name)
    assert used <= declared, used - declared
    assert Path(ops_exporter.CONTRACT).is_file()
