"""The tansu harness without its binary: settings, commands, and `kmon cluster --broker tansu`
refusing what it cannot do with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmon.cli import main
from kmon.env import SettingError
from kmon.local import tansu
from kmon.local.ports import Ports


def _kmon(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    message = ""
    try:
        code = main(argv)
    except SystemExit as e:  # a failure of the stack exits with its message
        code, message = (e.code, "") if isinstance(e.code, int) else (1, str(e.code))
    out = capsys.readouterr()
    return code, out.out + out.err + message


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KMON_CACHE", str(tmp_path / "cache"))  # nothing built there
    monkeypatch.setenv("KMON_PORT_BASE", "21000")
    return tmp_path


def test_each_engine_runs_one_broker_on_its_port(homes: Path) -> None:
    memory = tansu.LocalTansu(storage="memory")
    assert memory.bootstrap == f"127.0.0.1:{Ports(21000).tansu}"
    cmd = memory.command(Path("/bin/tansu"))
    assert cmd[:2] == ["/bin/tansu", "broker"]
    assert cmd[cmd.index("--storage-engine") + 1] == "memory://tansu/"
    assert cmd[cmd.index("--advertised-listener-url") + 1] == f"tcp://{memory.bootstrap}"
    sqlite = tansu.LocalTansu(storage="sqlite")
    # (tansu opens it under its working directory, the harness's root)
    assert sqlite.command(Path("/bin/tansu"))[-1] == "sqlite://tansu.db"
    assert sqlite.root == homes / "home" / "tansu"
    with pytest.raises(SettingError, match="--storage: must be one of memory, sqlite, postgres"):
        tansu.LocalTansu(storage="s3")


def test_a_build_with_other_features_is_not_used(homes: Path) -> None:
    root = tansu.root_dir()
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tansu").write_text("")
    assert tansu.find_binary() is None  # no stamp: which features is unknown
    (root / ".features").write_text("dynostore\n")  # the memory engine only
    assert tansu.find_binary() is None
    (root / ".features").write_text(" ".join(tansu.FEATURES) + "\n")
    assert tansu.find_binary() == root / "bin" / "tansu"


def test_cluster_verbs_say_what_is_wrong(homes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _kmon(["cluster", "up", "--broker", "tansu"], capsys)
    assert code == 2 and "kmon: error: tansu 0.6.0 is not built: run `make tansu`" in out
    code, out = _kmon(["cluster", "kill", "2", "--broker", "tansu"], capsys)
    assert code == 2 and "--broker tansu: one node, 1 (not 2)" in out
    code, out = _kmon(["cluster", "up", "--storage", "sqlite"], capsys)
    assert code == 2 and "--storage: only with --broker tansu" in out
    code, out = _kmon(["cluster", "status", "--broker", "tansu"], capsys)
    assert code == 1 and "tansu stopped" in out
    code, out = _kmon(["cluster", "pause", "1", "--broker", "tansu"], capsys)
    assert code == 1 and "tansu is not running" in out


def test_broker_report_refuses_what_it_cannot_run(homes: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _kmon(["nemesis", "broker-report", "--storage", "memory,s3"], capsys)
    assert code == 2 and "kmon: error: --storage: s3: one or more of memory, sqlite, " in out
    code, out = _kmon(["nemesis", "broker-report", "--storage", ","], capsys)
    assert code == 2 and "--storage: (none)" in out
    code, out = _kmon(["nemesis", "broker-report"], capsys)
    assert code == 2 and "tansu 0.6.0 is not built: run `make tansu`" in out


def _built(homes: Path) -> None:
    """A stand-in for `make tansu`'s build: the stamp says the pinned features."""
    root = tansu.root_dir()
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tansu").write_text("")
    (root / ".features").write_text(" ".join(tansu.FEATURES) + "\n")


def test_the_postgres_engine_needs_tansus_schema_from_the_user(
        homes: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _built(homes)
    monkeypatch.delenv("KMON_TANSU_PG_SCHEMA", raising=False)
    code, out = _kmon(["nemesis", "broker-report", "--storage", "postgres"], capsys)
    assert code == 2 and "kmon: error: --pg-schema (or KMON_TANSU_PG_SCHEMA): tansu's " in out
    assert "etc/initdb.d/010-schema.sql" in out
    code, out = _kmon(["nemesis", "broker-report", "--pg-schema", str(homes / "nope.sql")],
                      capsys)
    assert code == 2 and f"--pg-schema: {homes / 'nope.sql'}: no such file" in out
    code, out = _kmon(["cluster", "up", "--pg-schema", "x.sql"], capsys)
    assert code == 2 and "--pg-schema: only with --broker tansu" in out


def test_the_postgres_engine_talks_to_its_own_server(homes: Path) -> None:
    pg = tansu.LocalTansu(storage="postgres")
    assert pg.postgres.root == homes / "home" / "tansu" / "postgres"
    pg.postgres.root.mkdir(parents=True)
    pg.postgres.port_path.write_text("40123\n")  # chosen when the server first started
    url = pg.command(Path("/bin/tansu"))[-1]
    assert url == "postgres://postgres@127.0.0.1:40123/tansu?sslmode=disable"
