"""Prometheus' HTTP API and the dashboards' queries as Grafana would send them.

Shared by the dashboard checks against the contract's stand-in exporter
(``test_ops_dashboards_prometheus``) and against the real probe and monitor
(``test_full_stack``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kmon.dashboards import layout, queries, rules
from kmon.dashboards.grafana import expressions

# What Grafana substitutes, as Grafana would for a 1-hour dashboard with "All" selected.
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$cluster": ".*",
    "$namespace": ".*",
    "$job": ".*",
    "$__range": "5m",
    "$topic": ".*",
    "$partition": ".*",
}


def substitute(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, PromQL with Grafana's variables) of every panel target."""
    return [(uid, title, expr) for uid, build in layout.DASHBOARDS.items()
            for title, expr in expressions(build())]


def query_name(expr: str) -> str:
    """The name a panel's expression has in ``kmon.dashboards.queries`` (dashboard-qualified)."""
    for dash, table in (("overview", queries.OVERVIEW), ("drilldown", queries.DRILLDOWN),
                        ("annotations", queries.ANNOTATIONS)):
        for name, e in table.items():
            if e == expr:
                return f"{dash}.{name}"
    raise KeyError(expr)


class Prom:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400/422: a query that does not parse or run
            return json.load(e)

    def query(self, expr: str) -> dict[str, Any]:
        return self.get("/api/v1/query", query=expr)

    def series_of(self, expr: str) -> list[dict[str, Any]]:
        body = self.query(expr)
        assert body["status"] == "success", f"{expr}: {body.get('error')}"
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of a scalar-like query, None when it returns no series."""
        series = self.series_of(expr)
        assert len(series) <= 1, f"{expr}: {len(series)} series"
        return float(series[0]["value"][1]) if series else None

    def jobs_up(self) -> set[str]:
        active = self.get("/api/v1/targets")["data"]["activeTargets"]
        return {t["labels"]["job"] for t in active if t["health"] == "up"}

    def rule_groups(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/rules")["data"]["groups"]

    def rules_evaluated(self) -> bool:
        """Every generated rule group loaded and evaluated at least once."""
        expected = {g["name"] for g in rules.prometheus_rules()["groups"]}
        groups = self.rule_groups()
        # Not yet evaluated rules report the zero time.
        return {g["name"] for g in groups} == expected and all(
            not r.get("lastEvaluation", "0001").startswith("0001")
            for g in groups for r in g["rules"])

    def unhealthy_rules(self) -> list[tuple[str, str | None]]:
        return [(r["name"], r.get("lastError")) for g in self.rule_groups()
                for r in g["rules"] if r["health"] != "ok"]
