"""The PostgreSQL server tansu's postgres engine runs on (kmon.local.postgres), for real:
PostgreSQL 16 started on loopback, a database made with a schema, kept across a
restart, recreated empty on request, and no process left behind."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from kmon.env import SettingError
from kmon.local import procs
from kmon.local.postgres import LocalPostgres, pg_bin
from tests.helpers import missing_tool

SCHEMA = """
create table if not exists topic (id int generated always as identity primary key,
                                  name text not null unique);
"""


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    try:
        pg_bin("initdb")
    except SettingError:
        missing_tool("PostgreSQL 16 (the pgserver wheel, a test extra)")
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as
    # the postgres user when the suite runs as root. Short, too: a socket's path has a limit.
    parent = Path(tempfile.mkdtemp(prefix="kmon-pg-"))
    parent.chmod(0o755)
    pg = LocalPostgres(parent / "pg")
    yield pg
    pg.down()
    shutil.rmtree(parent, ignore_errors=True)


def test_a_database_with_the_schema_survives_a_restart_and_is_recreated_empty(
        server: LocalPostgres, tmp_path: Path) -> None:
    schema = tmp_path / "schema.sql"
    schema.write_text(SCHEMA)
    server.up()
    pid = server.pid()
    assert pid is not None and not server.has_database()
    server.fresh_database(schema)
    server.psql("-c", "insert into topic (name) values ('kmon-a')", database="tansu")
    server.down()
    assert server.pid() is None and not procs.is_alive(pid)
    server.up()  # the same directory: initdb is not run again, the rows are kept
    count = server.psql("-t", "-A", "-c", "select count(*) from topic", database="tansu")
    assert count.strip() == "1"
    server.fresh_database(schema)
    count = server.psql("-t", "-A", "-c", "select count(*) from topic", database="tansu")
    assert count.strip() == "0"
    assert server.url() == f"postgres://postgres@127.0.0.1:{server.port}/tansu?sslmode=disable"
    version = server.psql("-t", "-A", "-c", "show server_version_num")
    assert int(version) >= 160000  # tansu 0.6.0's SQL needs 16


def test_a_schema_that_fails_names_the_error(server: LocalPostgres, tmp_path: Path) -> None:
    from kmon.local.postgres import PostgresError

    bad = tmp_path / "bad.sql"
    bad.write_text("create table broken (x nosuchtype);\n")
    server.up()
    with pytest.raises(PostgresError, match='type "nosuchtype" does not exist'):
        server.fresh_database(bad)
