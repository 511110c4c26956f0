"""Small builders for Grafana dashboard JSON (schema 39): panels, rows, variables, placement.

Panels name their query (a key of ``kmon.dashboards.queries``); ``dashboard`` resolves the names,
numbers the panels and lays them out left to right on Grafana's 24-column grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
SCHEMA_VERSION = 39


@dataclass
class Target:
    query: str  # a key of the dashboard's query table
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    type: str  # timeseries, stat, table
    title: str
    targets: list[Target]
    description: str = ""
    unit: str = "short"
    width: int = 12
    height: int = 8
    stacked: bool = False
    thresholds: list[tuple[float | None, str]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Row:
    title: str


Item = Panel | Row


def ts(title: str, *targets: Target, **kw: Any) -> Panel:
    return Panel("timeseries", title, list(targets), **kw)


def stat(title: str, target: Target, **kw: Any) -> Panel:
    kw.setdefault("width", 6)
    kw.setdefault("height", 4)
    return Panel("stat", title, [target], **kw)


def table(title: str, target: Target, **kw: Any) -> Panel:
    target.instant = True
    return Panel("table", title, [target], **kw)


def _thresholds(steps: list[tuple[float | None, str]]) -> dict[str, Any]:
    steps = steps or [(None, "green")]
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def _panel_json(p: Panel, pid: int, x: int, y: int, queries: dict[str, str]) -> dict[str, Any]:
    targets = []
    for n, t in enumerate(p.targets):
        target: dict[str, Any] = {
            "datasource": DATASOURCE,
            "refId": chr(ord("A") + n),
            "expr": queries[t.query],
            "legendFormat": t.legend or "__auto",
            "range": not t.instant,
            "instant": t.instant,
        }
        if p.type == "table":
            target["format"] = "table"
        targets.append(target)
    defaults: dict[str, Any] = {"unit": p.unit, "thresholds": _thresholds(p.thresholds)}
    options: dict[str, Any]
    if p.type == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "stacking": {"mode": "normal" if p.stacked else "none", "group": "A"},
        }
        options = {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                       "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif p.type == "stat":
        defaults["color"] = {"mode": "thresholds"}
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "colorMode": "background", "graphMode": "none", "textMode": "auto"}
    else:
        options = {"showHeader": True, "cellHeight": "sm"}
    out: dict[str, Any] = {
        "id": pid,
        "type": p.type,
        "title": p.title,
        "description": p.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
    }
    if p.type == "table":
        out["transformations"] = [{"id": "organize", "options": {
            "excludeByName": {"Time": True}, "renameByName": {"Value": "count"}}}]
    if p.links:
        out["links"] = p.links
    return out


def _layout(items: list[Item], queries: dict[str, str]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    x = y = row_h = 0
    for pid, item in enumerate(items, start=1):
        if isinstance(item, Row):
            y += row_h
            x = row_h = 0
            panels.append({"id": pid, "type": "row", "title": item.title, "collapsed": False,
                           "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}, "panels": []})
            y += 1
            continue
        if x + item.width > GRID_WIDTH:
            y += row_h
            x = row_h = 0
        panels.append(_panel_json(item, pid, x, y, queries))
        x += item.width
        row_h = max(row_h, item.height)
    return panels


def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": ""}


def query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,  # on time range change: partitions come and go
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 3,  # numerical ascending, so partitions read 0, 1, 2, ..., 10
        "hide": 0,
        "regex": "",
        "options": [],
    }


def annotation(name: str, expr: str) -> dict[str, Any]:
    """A Prometheus annotation query: a mark at every step where ``expr`` returns a series."""
    return {
        "name": name.replace("_", " ").capitalize(),
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "orange",
        "expr": expr,
        "step": "60s",
        "titleFormat": name.replace("_", " "),
        "textFormat": "{{cluster}} {{instance}}",
        "useValueForTime": False,
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    items: list[Item],
    queries: dict[str, str],
    variables: list[dict[str, Any]],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["kmon"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,  # shared crosshair
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": [annotation(name, expr)
                                 for name, expr in (annotations or {}).items()]},
        "links": [{"title": "kmon dashboards", "type": "dashboards", "tags": ["kmon"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}],
        "panels": _layout(items, queries),
    }


def expressions(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel or annotation title, PromQL) of every query of a generated dashboard."""
    panels = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    marks = [(a["name"], a["expr"]) for a in dash["annotations"]["list"]]
    return panels + marks
