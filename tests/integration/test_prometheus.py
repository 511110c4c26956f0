"""kmon's own Prometheus starts, scrapes, and stops."""

from __future__ import annotations

import json
import urllib.request

from kmon.local import procs
from kmon.local.prometheus import LocalPrometheus
from tests.helpers import suite_stack, wait_until


def _targets(prom: LocalPrometheus) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{prom.url}/api/v1/targets", timeout=5) as response:
        return list(json.load(response)["data"]["activeTargets"])


def _loaded_config(prom: LocalPrometheus) -> str:
    """The configuration Prometheus runs with now (not the file on disk)."""
    with urllib.request.urlopen(f"{prom.url}/api/v1/status/config", timeout=5) as response:
        return str(json.load(response)["data"]["yaml"])


def test_prometheus_up_scrapes_and_down_stops() -> None:
    home, base = suite_stack()
    prom = LocalPrometheus(home=home, port_base=base, scrape_interval="1s")
    prom.up()
    try:
        pid = prom.pid()
        assert pid is not None and prom.ready()
        wait_until(
            lambda: any(t["health"] == "up" for t in _targets(prom)),
            "Prometheus scraped itself",
        )
        assert {t["labels"]["job"] for t in _targets(prom)} == {"prometheus"}  # type: ignore[index]

        # `up` on a running instance applies new targets by reloading, same process.
        assert "job_name: probe" not in _loaded_config(prom)
        prom.targets = {"probe": ["127.0.0.1:9"]}
        prom.up()
        assert prom.pid() == pid
        assert "job_name: probe" in _loaded_config(prom)
    finally:
        prom.down()
    assert prom.pid() is None and not procs.is_alive(pid)
