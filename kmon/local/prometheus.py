"""kmon's own Prometheus for the local stack (Debian's binary, not the Debian service).

State lives under ``<KMON_HOME>/prometheus/``: the generated ``prometheus.yml``, the TSDB in
``data/``, ``prometheus.log`` and a ``pid`` file. It listens on ``127.0.0.1:<base+20>``.
Scrape targets and rule files are given by the caller; Prometheus always scrapes itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from kmon import env
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.ports import Ports


class PrometheusError(RuntimeError):
    """Prometheus did not start or stop as asked."""


def parse_targets(items: Sequence[str]) -> dict[str, list[str]]:
    """``["job=host:port", ...]`` (from ``--target``) into ``{job: [host:port, ...]}``."""
    out: dict[str, list[str]] = {}
    for item in items:
        job, sep, target = item.partition("=")
        host, colon, port = target.rpartition(":")
        if not sep or not job or not colon or not host or not port.isdigit():
            raise SettingError(f"scrape target {item!r} is not job=host:port")
        out.setdefault(job, []).append(target)
    return out


class LocalPrometheus:
    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        port_base: int | None = None,
        targets: Mapping[str, Sequence[str]] | None = None,
        rule_files: Sequence[str | os.PathLike[str]] = (),
        scrape_interval: str = "5s",
        cluster: str = "local",
        alertmanagers: Sequence[str] = (),
    ) -> None:
        self.home = env.kmon_home(home)
        self.ports = Ports(env.port_base(port_base))
        self.targets = {job: list(ts) for job, ts in (targets or {}).items()}
        self.rule_files = [str(Path(f).resolve()) for f in rule_files]
        self.scrape_interval = scrape_interval
        self.cluster = cluster
        self.alertmanagers = list(alertmanagers)

    @property
    def root(self) -> Path:
        return self.home / "prometheus"

    @property
    def config_path(self) -> Path:
        return self.root / "prometheus.yml"

    @property
    def log_path(self) -> Path:
        return self.root / "prometheus.log"

    @property
    def pid_path(self) -> Path:
        return self.root / "pid"

    @property
    def port(self) -> int:
        return self.ports.prometheus

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _marker(self) -> str:
        return f"--config.file={self.config_path}"

    def pid(self) -> int | None:
        return procs.read_pid(self.pid_path, self._marker())

    def config(self) -> dict[str, object]:
        """The generated configuration, as a dict."""
        own = f"127.0.0.1:{self.port}"
        jobs = {"prometheus": [own], **self.targets}
        config: dict[str, object] = {
            "global": {
                # Short intervals: local runs and tests last minutes, not days.
                "scrape_interval": self.scrape_interval,
                "evaluation_interval": self.scrape_interval,
            },
            "rule_files": self.rule_files,
            "scrape_configs": [self._scrape_config(job, ts) for job, ts in jobs.items()],
        }
        if self.alertmanagers:
            config["alerting"] = {"alertmanagers": [
                {"static_configs": [{"targets": list(self.alertmanagers)}]}]}
        return config

    def _scrape_config(self, job: str, targets: Sequence[str]) -> dict[str, object]:
        """Every target carries the watched cluster's label, as the Helm chart's ServiceMonitors
        add it: ``up`` and ``absent(up)`` then name the cluster too. kmon's own metrics carry
        the same label; ``honor_labels`` keeps theirs rather than renaming it."""
        return {"job_name": job, "honor_labels": True,
                "static_configs": [{"targets": list(targets),
                                    "labels": {"cluster": self.cluster}}]}

    def write_config(self) -> None:
        """Write ``prometheus.yml`` and check it with promtool (fails naming the problem)."""
        promtool = shutil.which("promtool")
        if promtool is None:
            raise SettingError("promtool not found: run `kmon setup` (installs prometheus)")
        self.root.mkdir(parents=True, exist_ok=True)
        candidate = self.config_path.with_suffix(".yml.new")
        candidate.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        check = subprocess.run(
            [promtool, "check", "config", str(candidate)], capture_output=True, text=True,
            check=False,
        )
        if check.returncode != 0:
            raise SettingError(
                f"Prometheus config rejected by promtool:\n{check.stdout}{check.stderr}"
            )
        candidate.replace(self.config_path)

    def up(self, timeout: float = 60.0) -> None:
        """Start Prometheus, or reload it with the new config if it already runs."""
        binary = shutil.which("prometheus")
        if binary is None:
            raise SettingError("prometheus not found: run `kmon setup` (installs Debian's package)")
        self.write_config()
        if self.pid() is not None:
            self.reload()
            return
        if procs.port_in_use(self.port):
            raise SettingError(
                f"port {self.port} (Prometheus) is already in use; pick another base with "
                "--port-base or KMON_PORT_BASE"
            )
        cmd = [
            binary,
            self._marker(),
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            # Lets `up` apply new targets and rules to a running instance (POST /-/reload).
            "--web.enable-lifecycle",
            # Local data is for the run at hand, not for history.
            "--storage.tsdb.retention.time=2d",
        ]
        pid = procs.spawn(cmd, self.log_path, self.root)
        self.pid_path.write_text(f"{pid}\n")
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.pid() is None:
                raise PrometheusError(
                    f"Prometheus exited; end of {self.log_path}:\n{procs.tail(self.log_path)}"
                )
            if time.monotonic() >= deadline:
                raise PrometheusError(f"Prometheus not ready after {timeout:.0f}s")
            time.sleep(0.2)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def reload(self) -> None:
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 200:
                raise PrometheusError(f"reload failed: HTTP {response.status}")

    def down(self, timeout: float = 20.0) -> None:
        pid = self.pid()
        if pid is not None:
            procs.terminate(self.pid_path, pid, timeout)

    def status(self) -> str:
        pid = self.pid()
        if pid is None:
            return "stopped"
        return f"running (pid {pid}, {self.url}, {'ready' if self.ready() else 'not ready'})"
