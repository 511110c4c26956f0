"""The broker report's rows, preset and faults, without a broker."""

from __future__ import annotations

from pathlib import Path

from kmon.local.cluster import LocalCluster
from kmon.nemesis import brokers, presets
from kmon.nemesis.matrix import RowResult, judge


class _FakeTansu:
    """What the faults call on a LocalTansu, recorded."""

    storage = "sqlite"

    def __init__(self, state: str = "running") -> None:
        self.state, self.calls = state, []

    def status(self) -> object:
        return type("S", (), {"state": self.state})()

    def pause(self) -> int:
        self.calls.append("pause")
        self.state = "paused"
        return 41

    def resume(self) -> int:
        self.calls.append("resume")
        self.state = "running"
        return 41

    def kill(self) -> int:
        self.calls.append("kill")
        self.state = "stopped"
        return 41

    def start(self) -> int:
        self.calls.append("start")
        self.state = "running"
        return 42


def test_the_probe_talks_to_tansu_and_its_events_stay_on_kafka(tmp_path: Path) -> None:
    cluster = LocalCluster(home=tmp_path, port_base=40000)
    got = presets.get("tansu").probe_settings(cluster)
    assert got["kafka.bootstrap.servers"] == f"127.0.0.1:{cluster.ports.tansu}"
    assert "events.kafka.bootstrap.servers" not in got  # the matrix points events at Kafka
    assert got["replication_factor"] == "1" and got["coverage"] == "false"
    assert brokers.tansu_of(cluster, "sqlite").bootstrap == got["kafka.bootstrap.servers"]


def test_each_engine_has_a_healthy_a_paused_and_a_crashed_row() -> None:
    rows = [s for e in ("memory", "sqlite") for s in brokers.tansu_scenarios(e)]
    assert [s.name for s in rows] == [f"tansu-{e}-{k}" for e in ("memory", "sqlite")
                                      for k in ("healthy", "pause", "crash")]
    for s in rows:
        assert s.preset == "tansu" and not s.must and not s.any_of
        # a report, not a test: whatever the broker does is written down, never a FAIL
        assert judge(s, {"lost-write": 3, "inconsistent-offsets": 9, "unseen": 4})[0] == "pass"
    assert [s.make_fault is None for s in rows[:3]] == [True, False, False]


def test_pause_and_crash_undo_only_what_they_did() -> None:
    t = _FakeTansu()
    p = brokers.TansuPause(t)  # type: ignore[arg-type]
    p.start()
    p.stop()
    assert t.calls == ["pause", "resume"] and p.record.info["pid"] == 41
    t = _FakeTansu()
    c = brokers.TansuCrash(t)  # type: ignore[arg-type]
    c.start()
    c.stop()
    assert t.calls == ["kill", "start"] and c.record.info["new_pid"] == 42
    t = _FakeTansu()
    c = brokers.TansuCrash(t)  # type: ignore[arg-type]
    c.start()
    t.state = "running"  # started by someone else meanwhile: not started twice
    c.stop()
    assert t.calls == ["kill"]


def test_the_report_names_each_rows_findings(tmp_path: Path) -> None:
    s = brokers.tansu_scenarios("memory")[2]
    r = RowResult(s.name, s.origin, s.preset, s.note, s.must, s.any_of, ())
    r.reported, r.offline, r.ops, r.verdict = {"lost-write": 7}, {"lost-write": 7}, 900, "pass"
    out = tmp_path / "tansu-runs.md"
    brokers.write_report(out, [r], 150.0, "0.6.0")
    text = out.read_text()
    assert text.startswith("# tansu 0.6.0: kmon's runs")
    assert "| tansu-memory-crash | real | SIGKILL the broker" in text
    assert "lost-write 7 | lost-write 7 |" in text


def test_a_fresh_broker_starts_without_an_earlier_runs_sqlite_files(tmp_path: Path) -> None:
    from kmon.local.tansu import LocalTansu

    tansu = LocalTansu(home=tmp_path, port_base=40000, storage="sqlite")
    tansu.root.mkdir(parents=True)
    left = [tansu.root / n for n in ("tansu.db", "tansu.db-wal", "tansu.db-shm")]
    for f in left:
        f.write_bytes(b"x")
    calls: list[str] = []
    tansu.down = lambda: calls.append("down")  # type: ignore[method-assign]
    tansu.up = lambda: calls.append("up")  # type: ignore[method-assign]
    brokers.fresh_broker(tansu)
    assert calls == ["down", "up"] and not any(f.exists() for f in left)
