"""`kmon probe --check` (the chart's `helm test`), without a cluster: what it does when none
answers. tests/integration/test_probe_check.py runs it against the suite's cluster."""

from __future__ import annotations

import pytest

from kmon.cli import build_parser, probe_check
from kmon.probes import config as probe_config


def test_an_unreachable_cluster_fails_the_check_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(probe_check, "TIMEOUT_S", 2.0)
    cfg = probe_config.load(None, env={}, overrides={"kafka.bootstrap.servers": "127.0.0.1:9"})
    assert probe_check.check(cfg) == 1
    out = capsys.readouterr().out
    assert "probed cluster 127.0.0.1:9: unreachable" in out
    assert "events cluster 127.0.0.1:9: unreachable" in out


def test_check_is_a_probe_flag() -> None:
    args = build_parser().parse_args(["probe", "--config", "/etc/kmon/config/probe.yaml",
                                      "--check"])
    assert args.check is True
    assert build_parser().parse_args(["probe"]).check is False
