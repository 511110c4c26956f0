"""A fake of the parts of Grafana's HTTP API that `kmon dashboards push` uses.

No Grafana server can be built here (the Go module proxy refuses github.com/grafana/grafana and
no other registry ships one), so push is tested against this: an HTTP server on a free port that
answers like Grafana 11/12 per its HTTP API documentation (folders, dashboards, data sources,
alerting provisioning), checks authentication and the request bodies' required fields, and keeps
what it was sent so tests can look. It rejects what Grafana rejects where that matters to kmon:
unknown folders, a dashboard without uid/title, an alert rule missing a required field or with a
bad state, a rule group whose interval is not a multiple of 10 s, a second create of a uid.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RULE_REQUIRED = ("title", "condition", "data", "folderUID", "ruleGroup", "for", "noDataState",
                 "execErrState", "orgID")
NO_DATA_STATES = {"Alerting", "NoData", "OK"}
EXEC_ERR_STATES = {"Alerting", "Error", "OK"}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


class FakeGrafana:
    def __init__(self, token: str = "glsa_test", user: str = "admin", password: str = "secret"):
        self.token, self.user, self.password = token, user, password
        self.folders: dict[str, dict[str, Any]] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.rules: dict[str, dict[str, Any]] = {}
        self.groups: dict[tuple[str, str], dict[str, Any]] = {}
        self.datasources = [
            {"id": 1, "uid": "loki-1", "name": "Loki", "type": "loki", "isDefault": False},
            {"id": 2, "uid": "prom-main", "name": "Prometheus", "type": "prometheus",
             "isDefault": True},
        ]
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeGrafana:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # -----------------------------------------------------------------------------------------

    def authorized(self, header: str | None) -> bool:
        if header == f"Bearer {self.token}":
            return True
        if header and header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            return (user, password) == (self.user, self.password)
        return False

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self._lock:
            self.requests.append((method, path))
            for pattern, verb, fn in ROUTES:
                m = re.fullmatch(pattern, path)
                if m and verb == method:
                    return fn(self, body, *m.groups())
        return 404, {"message": "Not found"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not fake.authorized(self.headers.get("Authorization")):
                    status, out = 401, {"message": "Unauthorized"}
                else:
                    try:
                        body = json.loads(raw) if raw else None
                    except ValueError:
                        status, out = 400, {"message": "bad request data"}
                    else:
                        status, out = fake.handle(method, self.path.split("?")[0], body)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        return Handler


def _health(g: FakeGrafana, body: Any) -> tuple[int, Any]:
    return 200, {"commit": "fake", "database": "ok", "version": "11.6.0"}


def _get_folder(g: FakeGrafana, body: Any, uid: str) -> tuple[int, Any]:
    if uid not in g.folders:
        return 404, {"message": "folder not found", "status": "not-found"}
    return 200, g.folders[uid]


def _create_folder(g: FakeGrafana, body: Any) -> tuple[int, Any]:
    uid = body.get("uid") or f"f{len(g.folders)}"
    if not body.get("title"):
        return 400, {"message": "folder title cannot be empty"}
    if uid in g.folders:
        return 409, {"message": "a folder with the same uid already exists"}
    g.folders[uid] = {"id": len(g.folders) + 1, "uid": uid, "title": body["title"],
                      "version": 1}
    return 200, g.folders[uid]


def _save_dashboard(g: FakeGrafana, body: Any) -> tuple[int, Any]:
    dash = (body or {}).get("dashboard")
    if not isinstance(dash, dict) or not dash.get("title"):
        return 400, {"message": "Dashboard title cannot be empty", "status": "empty-name"}
    uid = dash.get("uid")
    if not uid:
        return 400, {"message": "kmon always sets a uid"}
    folder = body.get("folderUid", "")
    if folder and folder not in g.folders:
        return 400, {"message": "folder not found", "status": "folder-not-found"}
    old = g.dashboards.get(uid)
    if old is not None and not body.get("overwrite"):
        return 412, {"message": "A dashboard with the same uid already exists",
                     "status": "name-exists"}
    version = (old["dashboard"]["version"] + 1) if old else 1
    dash_id = old["dashboard"]["id"] if old else 100 + len(g.dashboards)
    stored = {**dash, "version": version, "id": dash_id}
    g.dashboards[uid] = {"dashboard": stored, "meta": {"folderUid": folder,
                                                       "message": body.get("message")}}
    slug = re.sub(r"[^a-z0-9]+", "-", dash["title"].lower()).strip("-")
    return 200, {"id": stored["id"], "uid": uid, "url": f"/d/{uid}/{slug}", "status": "success",
                 "version": version, "slug": slug}


def _get_dashboard(g: FakeGrafana, body: Any, uid: str) -> tuple[int, Any]:
    if uid not in g.dashboards:
        return 404, {"message": "Dashboard not found"}
    return 200, g.dashboards[uid]


def _datasources(g: FakeGrafana, body: Any) -> tuple[int, Any]:
    return 200, g.datasources


def _validate_rule(g: FakeGrafana, rule: Any) -> str | None:
    if not isinstance(rule, dict):
        return "rule must be an object"
    missing = [f for f in RULE_REQUIRED if f not in rule]
    if missing:
        return f"invalid alert rule: missing {', '.join(missing)}"
    if rule["folderUID"] not in g.folders:
        return f"folder {rule['folderUID']} does not exist"
    if rule["noDataState"] not in NO_DATA_STATES or rule["execErrState"] not in EXEC_ERR_STATES:
        return "invalid noDataState/execErrState"
    if not DURATION.match(str(rule["for"])):
        return f"invalid for: {rule['for']}"
    refs = {q.get("refId") for q in rule["data"]}
    if rule["condition"] not in refs:
        return f"condition {rule['condition']} is not one of the queries {sorted(refs)}"
    for q in rule["data"]:
        if not q.get("datasourceUid") or "model" not in q:
            return "each query needs datasourceUid and model"
        if q["datasourceUid"] != "__expr__" and q["datasourceUid"] not in {
                d["uid"] for d in g.datasources}:
            return f"data source {q['datasourceUid']} not found"
    if rule.get("uid") and not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", rule["uid"]):
        return "invalid uid"
    return None


def _get_rule(g: FakeGrafana, body: Any, uid: str) -> tuple[int, Any]:
    if uid not in g.rules:
        return 404, {"message": "rule not found"}  # what Grafana's provisioning API answers
    return 200, g.rules[uid]


def _create_rule(g: FakeGrafana, body: Any) -> tuple[int, Any]:
    error = _validate_rule(g, body)
    if error:
        return 400, {"message": error}
    if body.get("uid") in g.rules:
        return 409, {"message": "conflict: a rule with this uid exists"}
    g.rules[body["uid"]] = {**body, "provenance": "api", "id": len(g.rules) + 1}
    return 201, g.rules[body["uid"]]


def _update_rule(g: FakeGrafana, body: Any, uid: str) -> tuple[int, Any]:
    if uid not in g.rules:
        return 404, {"message": "rule not found"}
    error = _validate_rule(g, body)
    if error:
        return 400, {"message": error}
    g.rules[uid] = {**body, "uid": uid, "provenance": "api", "id": g.rules[uid]["id"]}
    return 200, g.rules[uid]


def _put_group(g: FakeGrafana, body: Any, folder: str, group: str) -> tuple[int, Any]:
    if folder not in g.folders:
        return 404, {"message": "folder not found"}
    interval = body.get("interval")
    if not isinstance(interval, int) or interval <= 0 or interval % 10:
        return 400, {"message": "interval must be a positive multiple of 10 seconds"}
    for rule in body.get("rules", []):
        error = _validate_rule(g, rule)
        if error:
            return 400, {"message": error}
        if rule["ruleGroup"] != group or rule["folderUID"] != folder:
            return 400, {"message": "rule group and folder of a rule must match the path"}
    g.groups[(folder, group)] = body
    for rule in body.get("rules", []):
        g.rules[rule["uid"]] = {**g.rules.get(rule["uid"], {}), **rule, "provenance": "api"}
    return 200, body


def _get_group(g: FakeGrafana, body: Any, folder: str, group: str) -> tuple[int, Any]:
    if (folder, group) not in g.groups:
        return 404, {"message": "rule group not found"}
    return 200, g.groups[(folder, group)]


ROUTES = [
    (r"/api/health", "GET", _health),
    (r"/api/folders/([^/]+)", "GET", _get_folder),
    (r"/api/folders", "POST", _create_folder),
    (r"/api/dashboards/db", "POST", _save_dashboard),
    (r"/api/dashboards/uid/([^/]+)", "GET", _get_dashboard),
    (r"/api/datasources", "GET", _datasources),
    (r"/api/v1/provisioning/alert-rules/([^/]+)", "GET", _get_rule),
    (r"/api/v1/provisioning/alert-rules", "POST", _create_rule),
    (r"/api/v1/provisioning/alert-rules/([^/]+)", "PUT", _update_rule),
    (r"/api/v1/provisioning/folder/([^/]+)/rule-groups/([^/]+)", "PUT", _put_group),
    (r"/api/v1/provisioning/folder/([^/]+)/rule-groups/([^/]+)", "GET", _get_group),
]
