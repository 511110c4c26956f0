"""Upsert kmon's dashboards and Grafana-managed alert rules into a Grafana, with grafana-client.

Idempotent: the folder is created once, dashboards are saved with ``overwrite``, each alert rule
is created or updated by its stable uid, then each rule group is put whole (its interval and rule
order). Nothing of anyone else's is touched.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from grafana_client import GrafanaApi
from grafana_client.client import GrafanaClientError

from kmon.dashboards import rules
from kmon.dashboards.layout import DASHBOARDS


class PushError(RuntimeError):
    """Grafana refused something; the message says what."""


@dataclass
class PushResult:
    folder_uid: str
    datasource_uid: str | None
    dashboards: list[str] = field(default_factory=list)  # URLs Grafana returned
    created_rules: list[str] = field(default_factory=list)
    updated_rules: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)


def connect(url: str, token: str | None = None, user: str | None = None,
            password: str | None = None, timeout: float = 10.0) -> GrafanaApi:
    """A client for ``url``: a service account token, or basic auth (also from the URL)."""
    credential: Any = token or ((user, password) if user else None)
    return GrafanaApi.from_url(url, credential=credential, timeout=timeout)


def default_datasource_uid(api: GrafanaApi) -> str:
    """The uid of Grafana's default Prometheus data source (else its only/first one)."""
    sources = [d for d in api.datasource.list_datasources() if d.get("type") == "prometheus"]
    if not sources:
        raise PushError("Grafana has no Prometheus data source: add one, or pass "
                        "--datasource-uid")
    return str(next((d for d in sources if d.get("isDefault")), sources[0])["uid"])


def ensure_folder(api: GrafanaApi, uid: str, title: str) -> None:
    try:
        api.folder.get_folder(uid)
    except GrafanaClientError as e:
        if e.status_code != 404:
            raise PushError(f"cannot read folder {uid!r}: {e.message}") from e
        api.folder.create_folder(title, uid=uid)


def push_dashboards(api: GrafanaApi, folder_uid: str) -> list[str]:
    urls = []
    for uid, build in DASHBOARDS.items():
        dash = copy.deepcopy(build())
        dash["id"] = None  # matched by uid; Grafana's numeric id differs per instance
        body = {"dashboard": dash, "folderUid": folder_uid, "overwrite": True,
                "message": "kmon dashboards push"}
        try:
            saved = api.dashboard.update_dashboard(body)
        except GrafanaClientError as e:
            raise PushError(f"dashboard {uid}: {e.message}") from e
        urls.append(str(saved.get("url", uid)))
    return urls


def push_alert_rules(api: GrafanaApi, folder_uid: str, datasource_uid: str, isolation: str,
                     result: PushResult) -> None:
    ap = api.alertingprovisioning
    for group in rules.grafana_api_groups(isolation, datasource_uid, folder_uid):
        for rule in group["rules"]:
            try:
                ap.get_alertrule(rule["uid"])
            except GrafanaClientError as e:
                if e.status_code != 404:
                    raise PushError(f"alert rule {rule['uid']}: {e.message}") from e
                _call(ap.create_alertrule, rule["uid"], rule)
                result.created_rules.append(rule["uid"])
            else:
                _call(ap.update_alertrule, rule["uid"], rule["uid"], rule)
                result.updated_rules.append(rule["uid"])
        _call(ap.update_rule_group, group["title"], folder_uid, group["title"], group)
        result.groups.append(group["title"])


def _call(fn: Any, what: str, *args: Any) -> Any:
    try:
        return fn(*args)
    except GrafanaClientError as e:
        raise PushError(f"{what}: {e.message}") from e


def push(api: GrafanaApi, *, folder_uid: str = rules.GRAFANA_FOLDER_UID,
         folder_title: str = rules.GRAFANA_FOLDER, datasource_uid: str | None = None,
         isolation: str = "read_committed", alerts: bool = True) -> PushResult:
    ensure_folder(api, folder_uid, folder_title)
    if alerts and datasource_uid is None:
        datasource_uid = default_datasource_uid(api)
    result = PushResult(folder_uid, datasource_uid)
    result.dashboards = push_dashboards(api, folder_uid)
    if alerts:
        assert datasource_uid is not None
        push_alert_rules(api, folder_uid, datasource_uid, isolation, result)
    return result
