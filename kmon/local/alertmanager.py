"""kmon's own Alertmanager for the local stack and the live alerting tests (Debian's binary).

State lives under ``<KMON_HOME>/alertmanager/``: the generated ``alertmanager.yml``, its
``data/``, a log and a pid file. It listens on ``127.0.0.1:<base+21>`` with clustering off, and
routes every alert to one webhook (the pager stand-in), grouped by alert name and cluster, with
kmon's recommended inhibitions (``kmon.dashboards.rules.INHIBIT_RULES``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kmon import env
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.ports import Ports

BINARY = "prometheus-alertmanager"  # Debian's name for alertmanager


@dataclass(frozen=True)
class Routing:
    """How notifications are grouped and repeated (short in tests, Alertmanager's in prod)."""

    group_by: tuple[str, ...] = ("alertname", "cluster")
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"


class LocalAlertmanager:
    def __init__(self, webhook_url: str, home: str | os.PathLike[str] | None = None,
                 port_base: int | None = None, routing: Routing | None = None) -> None:
        self.webhook_url = webhook_url
        self.home = env.kmon_home(home)
        self.ports = Ports(env.port_base(port_base))
        self.routing = routing or Routing()

    @property
    def root(self) -> Path:
        return self.home / "alertmanager"

    @property
    def config_path(self) -> Path:
        return self.root / "alertmanager.yml"

    @property
    def port(self) -> int:
        return self.ports.alertmanager

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def _marker(self) -> str:
        return f"--config.file={self.config_path}"

    def pid(self) -> int | None:
        return procs.read_pid(self.root / "pid", self._marker())

    def config(self) -> dict[str, Any]:
        from kmon.dashboards.rules import INHIBIT_RULES

        r = self.routing
        return {
            "route": {"receiver": "pager", "group_by": list(r.group_by),
                      "group_wait": r.group_wait, "group_interval": r.group_interval,
                      "repeat_interval": r.repeat_interval},
            "receivers": [{"name": "pager", "webhook_configs": [
                {"url": self.webhook_url, "send_resolved": True}]}],
            "inhibit_rules": [dict(rule) for rule in INHIBIT_RULES],
        }

    def write_config(self) -> None:
        """Write ``alertmanager.yml`` and check it with amtool (fails naming the problem)."""
        amtool = shutil.which("amtool")
        if amtool is None:
            raise SettingError("amtool not found: run `kmon setup` (installs Debian's "
                               "prometheus-alertmanager)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        check = subprocess.run([amtool, "check-config", str(self.config_path)],
                               capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise SettingError(f"Alertmanager config rejected by amtool:\n{check.stdout}"
                               f"{check.stderr}")

    def up(self, timeout: float = 60.0) -> None:
        binary = shutil.which(BINARY)
        if binary is None:
            raise SettingError(f"{BINARY} not found: run `kmon setup`")
        self.write_config()
        if procs.port_in_use(self.port):
            raise SettingError(f"port {self.port} (Alertmanager) is already in use; pick "
                               "another base with --port-base or KMON_PORT_BASE")
        cmd = [binary, self._marker(), f"--storage.path={self.root / 'data'}",
               f"--web.listen-address={self.address}",
               "--cluster.listen-address="]  # no gossip: one instance, loopback only
        pid = procs.spawn(cmd, self.root / "alertmanager.log", self.root)
        (self.root / "pid").write_text(f"{pid}\n")
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.pid() is None:
                log = self.root / "alertmanager.log"
                raise SettingError(f"Alertmanager exited; end of {log}:\n{procs.tail(log)}")
            if time.monotonic() >= deadline:
                raise SettingError(f"Alertmanager not ready after {timeout:.0f}s")
            time.sleep(0.2)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds now (API v2)."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as response:
            return list(json.load(response))

    def down(self, timeout: float = 20.0) -> None:
        pid = self.pid()
        if pid is not None:
            procs.terminate(self.root / "pid", pid, timeout)
