"""The matrix's judgement of a row and the injected findings, without a cluster."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from kmon.checker import check
from kmon.checker.anomaly import SHARE_ANOMALY_TYPES
from kmon.history.model import Op
from kmon.nemesis import inject, presets
from kmon.nemesis.matrix import Matrix, RowResult, forbidden_types, judge, short_read
from kmon.nemesis.probe_child import ProbeDied
from kmon.nemesis.scenarios import BY_NAME, SCENARIOS, Scenario
from kmon.probes import clients
from kmon.probes import config as probe_config
from kmon.synth import SynthConfig, healthy
from tests.checker.test_share import simulate


def test_healthy_row_forbids_every_anomaly_but_kafkas_normal_ones() -> None:
    bad = set(forbidden_types(BY_NAME["healthy"]))
    assert {"lost-write", "duplicate", "G1a", "unseen", "torn-transaction"} <= bad
    assert "int-send-skip" not in bad and "G0" not in bad


def test_every_row_without_share_consumers_forbids_the_share_types() -> None:
    # No row runs the probe's share mode yet: a share verdict on any row fails it.
    for s in SCENARIOS:
        named = {*s.must, *s.any_of, *s.allowed}
        if not named & set(SHARE_ANOMALY_TYPES):
            assert set(SHARE_ANOMALY_TYPES) <= set(forbidden_types(s)), s.name
    assert judge(BY_NAME["healthy"], {"share-lost": 1}) == ("FAIL", "forbidden: share-lost")


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


def test_a_final_read_that_fell_short_is_named() -> None:
    """Unseen values on a safe row come with their likeliest reason when the probe's final
    read did not get through: not a loss, a read the cluster did not serve in time."""
    r = RowResult("offsets-unclean", "real", "safe", "", (), (), ())
    assert short_read(r) == ""  # no final read recorded
    r.final_read = {"reached": True, "short": "", "polls": 3, "seconds": 2.9}
    assert short_read(r) == ""
    r.final_read = {"reached": False, "short": "t.0/1", "polls": 40, "seconds": 30.0}
    assert short_read(r) == "t.0/1 not read to the end in 30.0s"


@pytest.mark.parametrize("name", sorted(p for p in presets.PRESETS))
def test_presets_pass_the_probes_own_validation(name: str) -> None:
    cfg = probe_config.load(env={}, overrides={
        "kafka.bootstrap.servers": "127.0.0.1:1", "metrics.port": "0",
        **presets.get(name).probe_settings()})
    clients.validate(cfg)


def _history() -> list:
    ops = list(healthy(3000, SynthConfig(keys=4, processes=4, keys_per_process=4)))
    return [o for o in inject.renamed(ops, "x")]


def _base(name: str) -> list[Op]:
    """A history for ``name``'s injector: a simulated healthy share group for the share rows
    (lock 3 s, as the matrix's), else the synthetic healthy one."""
    if not name.startswith("share-"):
        return _history()
    ops, triggered = simulate(7, consumers=3, steps=300)
    assert not triggered
    return inject.renamed(ops, "x")


@pytest.mark.parametrize("name", sorted(inject.INJECTORS))
def test_each_injected_finding_gives_its_rows_verdict_offline(name: str) -> None:
    base = _base(name)
    before = check(base)
    assert not any(before.errors.values())
    ops, what = inject.INJECTORS[name](base, "kmon-mx-t-" + name)
    report = check(ops)
    found = {t: len(v) for t, v in report.errors.items() if v}
    # (the simulated share group ends with writes nobody was delivered yet: unseen in both)
    if report.unseen_counts != before.unseen_counts:
        found["unseen"] = sum(report.unseen_counts.values())
    assert judge(BY_NAME[name], found) == ("pass", ""), (what, found)
    if name.startswith("share-"):  # nothing but the promise broken
        assert found == {name: 1}, (what, found)


def test_replays_are_left_for_what_no_fault_or_filter_produces() -> None:
    # The Bufstream and KAFKA-17754 findings became live rows through the Kafka protocol
    # proxy; their injectors stay as offline proof of the checker's rules (above). Share
    # groups' broken promises, which Kafka 4.4 keeps under every fault here, are replays of
    # the share-healthy row's real history.
    injected = {s.name for s in SCENARIOS if s.origin == "injected"}
    assert injected == {n for n in inject.INJECTORS if n.startswith("share-")}
    assert set(inject.INJECTORS) - injected <= {s.name for s in SCENARIOS if s.origin == "proxy"}
    for name in injected:
        base = BY_NAME[BY_NAME[name].base]
        assert base.make_fault is None and base.origin == "real", name
        assert BY_NAME[name].must == (name,)


def test_every_proxy_row_says_which_bug_it_reproduces() -> None:
    for s in SCENARIOS:
        if s.origin == "proxy" and s.make_fault is not None:
            assert s.reproduces and "](" in s.reproduces, s.name  # a Markdown link
            assert presets.get(s.preset).kafka_proxied, s.name


class _Nemesis:
    heals = 0

    def heal(self) -> None:
        self.heals += 1


def _matrix(runs: list[str]) -> Matrix:
    """A matrix whose fault row's probe process crashes."""
    m = Matrix.__new__(Matrix)
    m.tag, m.results, m.scenarios, m.probe_deaths = "t", {}, {}, []
    m.nemesis = _Nemesis()

    def run(_s: Scenario, r: RowResult) -> None:
        runs.append(r.prefix)
        raise ProbeDied("the probe process died during shutdown: killed by SIGSEGV")

    m._run_fault = run
    return m


def test_a_row_whose_probe_crashed_fails_saying_how_and_is_not_run_again() -> None:
    # A rerun would hide a crash an operator's probe would hit too (issue 26).
    runs: list[str] = []
    m = _matrix(runs)
    m.run_fault(BY_NAME["delete-records"])
    r = m.results["delete-records"]
    assert runs == ["kmon-mx-t-delete-records"]
    assert r.error.startswith("the probe's process failed: ") and "SIGSEGV" in r.error
    assert m.probe_deaths == ["delete-records: the probe process died during shutdown: "
                              "killed by SIGSEGV"]
    assert m.nemesis.heals == 1


def _first_deliveries_only(ops: list[Op]) -> list[Op]:
    """``ops`` without any redelivery (count above 1) or acknowledgement of one: a run whose
    released records nobody was delivered again (CI's share-healthy run once)."""
    out, dropped = [], set()
    for op in ops:
        if op.type == "ok" and op.f == "share-poll" and op.value:
            dropped |= {(op.process, m[1], r[0]) for m in op.value for r in m[2] or () if r[2] > 1}
            op = dataclasses.replace(op, value=[
                ("share-read", m[1], [r for r in m[2] or () if r[2] == 1]) for m in op.value])
        elif op.f == "ack" and op.value:
            op = dataclasses.replace(op, value=[
                m for m in op.value if (op.process, m[1], m[2]) not in dropped])
        out.append(op)
    return out


def _nothing_released(ops: list[Op]) -> list[Op]:
    """``_first_deliveries_only`` with every RELEASE gone too (the release's record then
    delivered once and never acknowledged): CI's share-healthy run of stop 41 released
    nothing in its ten seconds."""
    out = []
    for op in _first_deliveries_only(ops):
        if op.f == "ack" and op.value:
            op = dataclasses.replace(op, value=[m for m in op.value if m[3] != "release"])
        out.append(op)
    return out


def _redeliveries(ops: list[Op]) -> list[object]:
    return [d for d in inject._deliveries(ops) if d.count > 1]


def _releases(ops: list[Op]) -> list[object]:
    return [m for op in ops if op.f == "ack" for m in op.value if m[3] == "release"]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("transform", "lacks", "phrase"), [
    (_first_deliveries_only, _redeliveries, "invented"),
    (_nothing_released, _releases, "made a release"),
], ids=["no-redelivery", "no-release"])
def test_the_delivery_count_finding_needs_no_redelivery_or_release_in_the_base(
        transform: Callable[[list[Op]], list[Op]], lacks: Callable[[list[Op]], list[object]],
        phrase: str, seed: int) -> None:
    ops, _ = simulate(seed, consumers=3, steps=300)
    base = inject.renamed(transform(ops), "x")
    assert not any(check(base).errors.values())
    assert not lacks(base)
    injected, what = inject.share_delivery_count(base, "kmon-mx-t-share-delivery-count")
    found = {t: len(v) for t, v in check(injected).errors.items() if v}
    assert found == {"share-delivery-count": 1}, (what, found)
    assert phrase in what


def test_a_base_without_what_an_injection_needs_fails_only_that_row() -> None:
    # CI once ran a share-healthy row with no released record to work on: one row's
    # failure, not the whole detection module's.
    sent: list = []
    m = _matrix([])
    m._send = sent.extend
    m.run_injected(BY_NAME["share-redelivered"], [])
    r = m.results["share-redelivered"]
    assert r.error.startswith("nothing to inject into: no rejected record")
    assert sent == []


@pytest.mark.parametrize("seed", range(40))
def test_each_share_injection_gives_its_one_verdict_on_many_groups(seed: int) -> None:
    # With the matrix's lock (3 s), as the detection module judges them: CI once had the
    # concurrent delivery injected into a record delivered again within that lock (two
    # verdicts), and another run had no released record redelivered at all.
    from kmon.checker import CheckConfig

    cfg = CheckConfig(share_lock_ns=round(presets.SHARE_LOCK_S * 1e9))
    ops, _ = simulate(seed, consumers=3, steps=300)
    base = inject.renamed(ops, "x")
    assert not any(check(base, cfg).errors.values())
    for name in sorted(n for n in inject.INJECTORS if n.startswith("share-")):
        injected, what = inject.INJECTORS[name](base, "kmon-mx-t-" + name)
        found = {t: len(v) for t, v in check(injected, cfg).errors.items() if v}
        assert found == {name: 1}, (name, what, found)
