"""The matrix's judgement of a row and the injected findings, without a cluster."""

from __future__ import annotations

import pytest

from kmon.checker import check
from kmon.nemesis import inject, presets
from kmon.nemesis.matrix import forbidden_types, judge
from kmon.nemesis.scenarios import BY_NAME, SCENARIOS
from kmon.probes import clients
from kmon.probes import config as probe_config
from kmon.synth import SynthConfig, healthy


def test_healthy_row_forbids_every_anomaly_but_kafkas_normal_ones() -> None:
    bad = set(forbidden_types(BY_NAME["healthy"]))
    assert {"lost-write", "duplicate", "G1a", "unseen", "torn-transaction"} <= bad
    assert "int-send-skip" not in bad and "G0" not in bad


def test_judge() -> None:
    s = BY_NAME["delete-records"]
    assert judge(s, {"lost-write": 3})[0] == "pass"
    assert judge(s, {})[0] == "FAIL"
    assert judge(s, {"lost-write": 1, "duplicate": 1}) == ("FAIL", "forbidden: duplicate")
    u = BY_NAME["unclean-election"]
    assert judge(u, {"inconsistent-offsets": 2})[0] == "pass"
    assert judge(u, {"poll-skip": 2}) == ("FAIL", "none of: lost-write, inconsistent-offsets")
    d = BY_NAME["idempotence-off"]
    assert judge(d, {}, provoked=False)[0] == "not provoked"
    assert judge(d, {"G1a": 1}, provoked=False)[0] == "FAIL"  # a false alarm is never excused


@pytest.mark.parametrize("name", sorted(p for p in presets.PRESETS))
def test_presets_pass_the_probes_own_validation(name: str) -> None:
    cfg = probe_config.load(env={}, overrides={
        "kafka.bootstrap.servers": "127.0.0.1:1", "metrics.port": "0",
        **presets.get(name).probe_settings()})
    clients.validate(cfg)


def _history() -> list:
    ops = list(healthy(3000, SynthConfig(keys=4, processes=4, keys_per_process=4)))
    return [o for o in inject.renamed(ops, "x")]


@pytest.mark.parametrize("name", sorted(inject.INJECTORS))
def test_each_injected_finding_gives_its_rows_verdict_offline(name: str) -> None:
    ops, what = inject.INJECTORS[name](_history(), "kmon-mx-t-" + name)
    report = check(ops)
    found = {t: len(v) for t, v in report.errors.items() if v}
    if report.unseen_counts and sum(report.unseen_counts.values()):
        found["unseen"] = sum(report.unseen_counts.values())
    assert judge(BY_NAME[name], found) == ("pass", ""), (what, found)


def test_every_injected_row_has_an_injector() -> None:
    assert {s.name for s in SCENARIOS if s.origin == "injected"} == set(inject.INJECTORS)
