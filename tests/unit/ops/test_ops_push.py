"""`kmon dashboards push` against a fake of Grafana's HTTP API (see fake_grafana for why)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_grafana import FakeGrafana

from kmon.cli import main
from kmon.dashboards import push, rules
from kmon.dashboards.layout import DASHBOARDS


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    with FakeGrafana() as g:
        yield g


def test_push_creates_folder_dashboards_and_every_alert_rule(grafana: FakeGrafana) -> None:
    api = push.connect(grafana.url, token=grafana.token)
    result = push.push(api)
    assert set(grafana.folders) == {"kmon"}
    assert set(grafana.dashboards) == set(DASHBOARDS)
    for uid, build in DASHBOARDS.items():
        stored = grafana.dashboards[uid]
        assert stored["meta"]["folderUid"] == "kmon"
        assert stored["dashboard"]["panels"] == build()["panels"]
    expected = {rules.grafana_uid(a): a for a in rules.alerts()}
    assert set(grafana.rules) == set(expected) == set(result.created_rules)
    for uid, alert in expected.items():
        rule = grafana.rules[uid]
        assert rule["title"] == alert.name and rule["for"] == alert.for_
        query = next(q for q in rule["data"] if q["refId"] == "A")
        assert query["model"]["expr"] == alert.expr
        # no --datasource-uid: Grafana's default Prometheus data source
        assert query["datasourceUid"] == "prom-main"
        assert rule["ruleGroup"] == alert.group and rule["folderUID"] == "kmon"
    assert {g for _, g in grafana.groups} == {a.group for a in rules.alerts()}
    assert all(body["interval"] == 60 for body in grafana.groups.values())


def test_push_twice_updates_in_place(grafana: FakeGrafana) -> None:
    api = push.connect(grafana.url, token=grafana.token)
    push.push(api)
    again = push.push(api, datasource_uid="prom-main")
    assert again.created_rules == []
    assert set(again.updated_rules) == {rules.grafana_uid(a) for a in rules.alerts()}
    assert len(grafana.rules) == len(rules.alerts())
    assert {d["dashboard"]["version"] for d in grafana.dashboards.values()} == {2}
    assert [m for m, p in grafana.requests if p == "/api/folders"] == ["POST"]  # created once


def test_read_uncommitted_pushes_fewer_anomaly_alerts(grafana: FakeGrafana) -> None:
    api = push.connect(grafana.url, token=grafana.token)
    push.push(api, isolation="read_uncommitted")
    titles = {r["title"] for r in grafana.rules.values()}
    assert "KmonAnomaly-lost-write" in titles
    assert {"KmonAnomaly-G1a", "KmonAnomaly-G1c", "KmonAnomaly-G0"}.isdisjoint(titles)


def test_basic_auth_from_the_url_and_dashboards_only(grafana: FakeGrafana) -> None:
    url = grafana.url.replace("http://", f"http://{grafana.user}:{grafana.password}@")
    result = push.push(push.connect(url), alerts=False)
    assert len(result.dashboards) == len(DASHBOARDS) and result.dashboards[0].startswith("/d/")
    assert grafana.rules == {}


def test_cli_push_with_token_from_env(grafana: FakeGrafana, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GRAFANA_URL", grafana.url)
    monkeypatch.setenv("GRAFANA_TOKEN", grafana.token)
    assert main(["dashboards", "push", "--datasource-uid", "prom-main"]) == 0
    out = capsys.readouterr().out
    assert f"alert rules: {len(rules.alerts())} created, 0 updated" in out
    assert "dashboard: /d/kmon-overview/" in out


def test_cli_push_with_a_bad_token_fails_saying_why(grafana: FakeGrafana) -> None:
    with pytest.raises(SystemExit, match="Unauthorized"):
        main(["dashboards", "push", "--url", grafana.url, "--token", "wrong"])
    assert grafana.dashboards == {}


def test_cli_push_without_url_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAFANA_URL", raising=False)
    assert main(["dashboards", "push"]) == 2


def test_no_prometheus_data_source_is_an_error(grafana: FakeGrafana) -> None:
    grafana.datasources = [d for d in grafana.datasources if d["type"] != "prometheus"]
    with pytest.raises(push.PushError, match="no Prometheus data source"):
        push.push(push.connect(grafana.url, token=grafana.token))


def test_fake_rejects_what_grafana_rejects(grafana: FakeGrafana) -> None:
    """The fake is strict where it matters: a rule without a required field is a 400."""
    api = push.connect(grafana.url, token=grafana.token)
    push.ensure_folder(api, "kmon", "kmon")
    group = rules.grafana_api_groups(datasource_uid="prom-main")[0]
    broken = {k: v for k, v in group["rules"][0].items() if k != "condition"}
    from grafana_client.client import GrafanaClientError

    with pytest.raises(GrafanaClientError, match="missing condition"):
        api.alertingprovisioning.create_alertrule(broken)
