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
    tansu = brokers.tansu_of(cluster, "sqlite")
    assert tansu.bootstrap == got["kafka.bootstrap.servers"]
    # behind its proxy: the broker listens elsewhere and advertises the proxy
    cmd = tansu.command(Path("/bin/tansu"))
    assert cmd[cmd.index("--listener-url") + 1] == f"tcp://127.0.0.1:{cluster.ports.tansu_direct}"
    assert cmd[cmd.index("--advertised-listener-url") + 1] == f"tcp://{tansu.bootstrap}"


KINDS = ("healthy", "pause", "crash", "net-latency", "net-timeout", "net-reset")


def test_each_engine_has_a_healthy_row_and_five_faults() -> None:
    engines = ("memory", "sqlite", "postgres")
    rows = [s for e in engines for s in brokers.tansu_scenarios(e)]
    assert [s.name for s in rows] == [f"tansu-{e}-{k}" for e in engines for k in KINDS]
    for s in rows:
        assert s.preset == "tansu" and not s.must and not s.any_of
        # a report, not a test: whatever the broker does is written down, never a FAIL
        assert judge(s, {"lost-write": 3, "inconsistent-offsets": 9, "unseen": 4})[0] == "pass"
    assert [s.make_fault is None for s in rows[:len(KINDS)]] == [True] + [False] * 5


class _FakeProxy:
    """What a network fault calls on LocalToxiproxy, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, str]] = []

    def is_up(self) -> bool:
        return True

    def add_toxic(self, node: object, toxic: object) -> None:
        self.calls.append(("add", node, toxic.type))  # type: ignore[attr-defined]

    def remove_toxic(self, node: object, name: str) -> None:
        self.calls.append(("remove", node, name))


def test_network_rows_degrade_tansus_own_proxy_and_undo_it(tmp_path: Path) -> None:
    cluster = LocalCluster(home=tmp_path, port_base=40000)
    by_kind = {s.name.split("-", 2)[2]: s for s in brokers.tansu_scenarios("sqlite")}
    proxy = _FakeProxy()
    latency = by_kind["net-latency"].make_fault(cluster, proxy, "p")  # type: ignore[misc,arg-type]
    latency.start()
    latency.stop()
    # both directions, on the proxy named tansu, never on a Kafka broker's
    assert proxy.calls == [("add", "tansu", "latency"), ("add", "tansu", "latency"),
                           ("remove", "tansu", "kmon-latency-downstream"),
                           ("remove", "tansu", "kmon-latency-upstream")]
    assert latency.params()["broker"] == "tansu" and "targets" not in latency.params()
    proxy.calls.clear()
    timeout = by_kind["net-timeout"].make_fault(cluster, proxy, "p")  # type: ignore[misc,arg-type]
    timeout.start()
    timeout.stop()
    assert proxy.calls[0] == ("add", "tansu", "timeout") and len(proxy.calls) == 2


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
    proxy = type("P", (), {"add_proxy": lambda self, *a: calls.append(f"proxy {a}")})()
    brokers.fresh_broker(tansu, proxy)  # type: ignore[arg-type]
    ports = tansu.port, tansu.listen_port
    assert calls == ["down", f"proxy ('tansu', {ports[0]}, {ports[1]})", "up"]
    assert not any(f.exists() for f in left)


def test_a_fresh_postgres_broker_gets_a_new_database_with_the_users_schema(
        tmp_path: Path) -> None:
    from kmon.local.tansu import LocalTansu

    schema = tmp_path / "010-schema.sql"
    schema.write_text("create table t (x int);\n")
    tansu = LocalTansu(home=tmp_path, port_base=40000, storage="postgres", pg_schema=schema)
    calls: list[str] = []
    tansu.down = lambda: calls.append("down")  # type: ignore[method-assign]
    tansu.up = lambda: calls.append("up")  # type: ignore[method-assign]
    tansu.postgres.up = lambda: calls.append("pg up")  # type: ignore[method-assign]
    tansu.postgres.fresh_database = (  # type: ignore[method-assign]
        lambda path: calls.append(f"pg fresh {path.name}"))
    proxy = type("P", (), {"add_proxy": lambda self, *a: calls.append("proxy")})()
    brokers.fresh_broker(tansu, proxy)  # type: ignore[arg-type]
    assert calls == ["down", "pg up", "pg fresh 010-schema.sql", "proxy", "up"]
    assert tansu.storage_url().startswith("postgres://postgres@127.0.0.1:")
