"""Generated dashboards and rules: committed files are current, the renderings never drift."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmon.checker.anomaly import ANOMALY_TYPES, SHARE_ANOMALY_TYPES
from kmon.checker.policy import ISOLATION_LEVELS, allowed_anomalies
from kmon.cli import main
from kmon.dashboards import generate, rules
from kmon.dashboards.grafana import expressions
from kmon.dashboards.layout import DASHBOARDS

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "kmon"
RUNBOOK = ROOT / "docs" / "runbook.md"


def test_committed_generated_files_match_a_fresh_generation() -> None:
    stale = generate.stale(generate.all_files(chart_dir=CHART))
    assert not stale, f"run `kmon dashboards generate` and commit: {stale}"


def test_generate_check_exits_1_on_a_stale_file(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out, chart = tmp_path / "generated", tmp_path / "chart"
    shutil.copytree(generate.GENERATED, out)
    shutil.copytree(CHART / "files", chart / "files")
    args = ["dashboards", "generate", "--out", str(out), "--chart", str(chart)]
    assert main([*args, "--check"]) == 0
    victim = out / generate.prometheus_rules_name("read_committed")
    victim.write_text(victim.read_text().replace("for: 5m", "for: 1m", 1))
    assert main([*args, "--check"]) == 1
    assert str(victim) in capsys.readouterr().err
    assert main(args) == 0  # regenerates
    assert main([*args, "--check"]) == 0


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((generate.GENERATED / name).read_text())


@pytest.mark.parametrize("isolation", ISOLATION_LEVELS)
def test_grafana_rules_are_the_prometheus_alerts(isolation: str) -> None:
    """Read back from the committed files: same alerts, PromQL, for, labels, annotations."""
    prom = {r["alert"]: r for g in _load(generate.prometheus_rules_name(isolation))["groups"]
            for r in g["rules"] if "alert" in r}
    graf = {r["title"]: (g, r) for g in _load(generate.grafana_rules_name(isolation))["groups"]
            for r in g["rules"]}
    assert set(prom) == set(graf) and prom
    for name, p in prom.items():
        group, g = graf[name]
        query = {q["refId"]: q for q in g["data"]}
        assert query[g["condition"]]["model"] == {
            "refId": "B", "type": "math", "expression": "is_number($A)"}
        assert query["A"]["model"]["expr"] == p["expr"]
        assert g["for"] == p["for"]
        assert g["labels"] == p["labels"]
        assert g["annotations"] == {k: v.replace("$value", "$values.A.Value")
                                    for k, v in p["annotations"].items()}
        assert g["noDataState"] == "OK"  # no series: nothing to alert on, as in Prometheus
        assert group["folder"] == "kmon" and group["interval"] == "1m"


def test_anomaly_alert_names_are_the_checker_names() -> None:
    for isolation in ISOLATION_LEVELS:
        allowed = allowed_anomalies(isolation)
        paging = [a for a in rules.alerts(isolation) if a.name.startswith("KmonAnomaly-")]
        assert [a.anchor for a in paging] == [
            t for t in ANOMALY_TYPES if t not in allowed and t not in rules.OFFLINE_ONLY]
        for a in paging:
            assert a.name == f"KmonAnomaly-{a.anchor}"
            assert f'anomaly="{a.anchor}"' in a.expr


def _anchors() -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', RUNBOOK.read_text()))


def test_every_alert_links_to_a_runbook_section() -> None:
    anchors = _anchors()
    for isolation in ISOLATION_LEVELS:
        for alert in rules.alerts(isolation):
            url = alert.annotations()["runbook_url"]
            assert url.startswith(rules.RUNBOOK_URL + "#")
            assert url.split("#", 1)[1] in anchors, alert.name


def test_runbook_has_a_section_per_anomaly_saying_whether_it_pages() -> None:
    text = RUNBOOK.read_text()
    assert set(ANOMALY_TYPES) <= _anchors()
    for anomaly in ANOMALY_TYPES:
        section = text.split(f'<a id="{anomaly}"></a>', 1)[1].split("<a id=", 1)[0]
        assert f"## {anomaly}\n" in section
        for heading in ("**What it means:**", "**Pages:**"):
            assert heading in section, (anomaly, heading)
        if anomaly in allowed_anomalies("read_committed") or anomaly in rules.OFFLINE_ONLY:
            assert "**Pages:** no" in section
        else:
            assert f"`KmonAnomaly-{anomaly}`" in section
            assert "**First checks:**" in section and "kmon investigate" in section


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dash["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_dashboard_layout_is_sound(uid: str) -> None:
    dash = json.loads((generate.GENERATED / f"{uid}.json").read_text())
    assert dash["uid"] == uid and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, p["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))
    for p in _panels(dash):
        assert p["targets"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["expr"] for t in p["targets"])
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names[0] == "datasource" and "topic" in names


def test_drilldown_is_templated_by_topic_and_partition() -> None:
    dash = DASHBOARDS["kmon-drilldown"]()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["partition"]["query"]["query"].endswith('topic=~"$topic"}, partition)')
    for p in _panels(dash):
        for t in p["targets"]:
            if "kmon_anomalies_total" in t["expr"] or "kmon_unseen" in t["expr"]:
                assert 'partition=~"$partition"' in t["expr"], p["title"]


def test_every_query_is_scoped_to_the_chosen_clusters() -> None:
    """Two releases in one Prometheus never add up: every series a panel reads is selected by
    ``$cluster`` and every aggregation keeps ``cluster``."""
    for uid, build in DASHBOARDS.items():
        dash = build()
        names = [v["name"] for v in dash["templating"]["list"]]
        assert names[:4] == ["datasource", "cluster", "namespace", "job"], uid
        for title, expr in expressions(dash):
            assert 'cluster=~"$cluster"' in expr, (uid, title)
            for by in re.findall(r"\b(?:sum|max|count|group) by \(([^)]*)\)", expr):
                assert "cluster" in by.split(", "), (uid, title, expr)


def test_overview_has_the_on_call_panels() -> None:
    titles = {p["title"] for p in _panels(DASHBOARDS["kmon-overview"]())}
    assert {"Firing kmon alerts", "Anomalies by broker", "Targets up against expected",
            "Anomalies Kafka's model forbids"} <= titles
    marks = DASHBOARDS["kmon-overview"]()["annotations"]["list"]
    assert [m["name"] for m in marks] == ["Monitor restarts"]
    forbidden = next(t["expr"] for p in _panels(DASHBOARDS["kmon-overview"]())
                     for t in p["targets"] if p["title"] == "Anomalies Kafka's model forbids")
    # follows the probes' isolation level: one branch per level
    assert 'isolation="read_committed"' in forbidden
    assert 'isolation="read_uncommitted"' in forbidden


def test_overview_covers_what_the_issue_asks_for() -> None:
    exprs = " ".join(t["expr"] for p in _panels(DASHBOARDS["kmon-overview"]())
                     for t in p["targets"])
    for metric in ("kmon_anomalies_total", "kmon_unseen_values", "kmon_realtime_lag_seconds",
                   "kmon_probe_ops", "kmon_probe_op_duration_seconds",
                   "kmon_monitor_input_events_per_second", "kmon_monitor_batch_duration_seconds",
                   "kmon_monitor_watermark_delay_seconds", "kmon_monitor_state_rows",
                   "kmon_dead_letters_total"):
        assert metric in exprs, metric


def test_overview_has_a_share_group_row_for_every_share_anomaly() -> None:
    """The share groups' row (docs/share-groups.md): its anomaly panels select exactly the
    five share types, and its ops panel the share consumers' ops."""
    dash = DASHBOARDS["kmon-overview"]()
    rows = [p for p in dash["panels"] if p["type"] == "row"]
    start = next(i for i, p in enumerate(dash["panels"]) if p["title"] == "Share groups (KIP-932)")
    end = next(i for i, p in enumerate(dash["panels"])
               if p["type"] == "row" and i > start)
    panels = dash["panels"][start + 1:end]
    assert rows and [p["title"] for p in panels] == [
        "Share-group anomalies by type", "Share-group anomalies in the range",
        "Share ops by outcome"]
    for p in panels[:2]:
        (expr,) = [t["expr"] for t in p["targets"]]
        (selected,) = re.findall(r'anomaly=~"([^"]+)"', expr)
        assert selected.split("|") == list(SHARE_ANOMALY_TYPES), p["title"]
        assert "kmon_anomalies_total" in expr
    (ops_expr,) = [t["expr"] for t in panels[2]["targets"]]
    assert 'f=~"share-poll|ack"' in ops_expr and "kmon_probe_ops_total" in ops_expr
    for t in SHARE_ANOMALY_TYPES:
        assert t in panels[0]["description"], t
