"""The generated Prometheus config, checked by Debian's promtool."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kmon.env import SettingError
from kmon.local.prometheus import LocalPrometheus, parse_targets


def test_parse_targets() -> None:
    assert parse_targets(["probe=127.0.0.1:19122", "probe=127.0.0.1:19123", "m=h:1"]) == {
        "probe": ["127.0.0.1:19122", "127.0.0.1:19123"],
        "m": ["h:1"],
    }
    for bad in ["127.0.0.1:19122", "probe=", "probe=host", "probe=host:port"]:
        with pytest.raises(SettingError, match="not job=host:port"):
            parse_targets([bad])


def test_config_scrapes_itself_and_the_targets(tmp_path: Path) -> None:
    prom = LocalPrometheus(home=tmp_path, port_base=30000, targets={"probe": ["127.0.0.1:1"]})
    prom.write_config()  # promtool accepts it
    config = yaml.safe_load(prom.config_path.read_text())
    jobs = {c["job_name"]: c["static_configs"][0]["targets"] for c in config["scrape_configs"]}
    assert jobs == {"prometheus": ["127.0.0.1:30020"], "probe": ["127.0.0.1:1"]}


def test_promtool_rejects_a_missing_rule_file(tmp_path: Path) -> None:
    prom = LocalPrometheus(home=tmp_path, port_base=30000, rule_files=[tmp_path / "nope.yml"])
    with pytest.raises(SettingError, match="rejected by promtool"):
        prom.write_config()
    assert not prom.config_path.exists()  # the rejected config never replaces a good one


def test_every_target_is_labelled_with_the_cluster_and_alerts_go_to_alertmanager(
    tmp_path: Path,
) -> None:
    prom = LocalPrometheus(home=tmp_path, port_base=30000, targets={"probe": ["127.0.0.1:1"]},
                           cluster="prod-eu", alertmanagers=["127.0.0.1:30021"])
    prom.write_config()  # promtool accepts it
    config = yaml.safe_load(prom.config_path.read_text())
    for scrape in config["scrape_configs"]:
        assert scrape["static_configs"][0]["labels"] == {"cluster": "prod-eu"}
        assert scrape["honor_labels"] is True  # the exporters' own cluster label is kept
    am = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["127.0.0.1:30021"]
