"""The probe's on-call metrics: the cluster label on every family, the last successes, the
probe's identity (issue 23's contract, probe side)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

import kmon
from kmon.probes import clients
from kmon.probes import config as probe_config
from kmon.probes.metrics import SUCCESS_FS, ProbeIdentity, ProbeMetrics
from kmon.probes.recorder import Recorder

LAST = "kmon_probe_last_success_timestamp_seconds"


def _metrics(cluster: str = "prod-eu.1") -> ProbeMetrics:
    return ProbeMetrics(CollectorRegistry(), ProbeIdentity(cluster=cluster, probe="p.abc123"))


def _value(m: ProbeMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {"cluster": m.identity.cluster, **labels})


def exercise(m: ProbeMetrics) -> None:
    """One sample of every labelled family, as the workload makes them."""
    m.completed("send", "ok", 0.01, 1.0)
    m.events_emitted.inc()
    m.events_dropped.inc()
    m.rebalances.labels(kind="assigned").inc()
    m.client_errors.labels(code="_MSG_TIMED_OUT").inc()
    m.keys_live.set(8)
    m.up.set(1)
    m.coverage(present=3, covered=3)


def test_every_probe_metric_family_carries_the_cluster() -> None:
    m = _metrics()
    exercise(m)
    families = list(m.registry.collect())
    assert len(families) == 12
    for fam in families:
        assert fam.samples, fam.name
        for s in fam.samples:
            assert s.labels.get("cluster") == "prod-eu.1", (fam.name, s)


def test_last_success_starts_at_the_start_time_for_send_poll_txn() -> None:
    m = _metrics()
    start = _value(m, "kmon_probe_start_timestamp_seconds")
    assert start == m.started_at
    assert {f: _value(m, LAST, f=f) for f in SUCCESS_FS} == dict.fromkeys(SUCCESS_FS, start)


@pytest.mark.parametrize("f", SUCCESS_FS)
def test_last_success_moves_on_ok_only(f: str) -> None:
    m = _metrics()
    start = m.started_at
    m.completed(f, "fail", 0.1, start + 10)
    m.completed(f, "info", 0.1, start + 20)
    assert _value(m, LAST, f=f) == start
    m.completed(f, "ok", 0.1, start + 30)
    assert _value(m, LAST, f=f) == start + 30
    m.completed(f, "info", 0.1, start + 40)
    assert _value(m, LAST, f=f) == start + 30


def test_other_ops_have_no_last_success() -> None:
    m = _metrics()
    m.completed("assign", "ok", 0.1, m.started_at + 1)
    assert _value(m, LAST, f="assign") is None
    assert _value(m, "kmon_probe_ops_total", f="assign", type="ok") == 1


def test_the_recorder_moves_last_success_when_an_op_completes_ok() -> None:
    m = _metrics()
    rec = Recorder("p.abc123", m)
    rec.invoke(0, "poll", None)
    rec.complete(0, "fail", None)
    assert _value(m, LAST, f="poll") == m.started_at
    rec.invoke(0, "poll", None)
    empty = rec.complete(0, "ok", [("poll", {})])  # an unreachable cluster: ok, nothing read
    assert empty is not None
    assert _value(m, LAST, f="poll") == m.started_at
    rec.invoke(0, "poll", None)
    op = rec.complete(0, "ok", [("poll", {3: [(0, 7)]})])
    assert op is not None
    assert _value(m, LAST, f="poll") == op.time / 1e9
    assert _value(m, "kmon_probe_ops_total", f="poll", type="ok") == 2
    rec.invoke(1, "send", None)
    sent = rec.complete(1, "ok", [("send", 3, 8, 1)])
    assert sent is not None and _value(m, LAST, f="send") == sent.time / 1e9


def _cfg(*sets: str) -> probe_config.ProbeConfig:
    overrides = dict(s.split("=", 1) for s in ("kafka.bootstrap.servers=127.0.0.1:1", *sets))
    return probe_config.load(env={}, overrides=overrides)


@pytest.mark.parametrize(("sets", "isolation"), [
    ((), "read_committed"),
    (("consumer.isolation.level=read_uncommitted",), "read_uncommitted"),
    (("kafka.isolation.level=read_uncommitted",), "read_uncommitted"),
])
def test_info_names_the_consumers_isolation_level(sets: tuple[str, ...], isolation: str) -> None:
    cfg = _cfg("cluster=c1", "name=n", *sets)
    m = ProbeMetrics(CollectorRegistry(), clients.identity(cfg))
    assert _value(m, "kmon_probe_info", probe=cfg.probe_id, isolation=isolation,
                  version=kmon.__version__) == 1
    assert m.identity.cluster == "c1"


def test_brokers_present_and_covered() -> None:
    m = _metrics()
    m.coverage(present=12, covered=11)
    assert _value(m, "kmon_probe_brokers", state="present") == 12
    assert _value(m, "kmon_probe_brokers", state="covered") == 11
