"""A PostgreSQL server for tansu's ``postgres`` storage engine: PostgreSQL 16 on loopback.

The server listens on 127.0.0.1 at a port the system picks free when it is first started
(kept in ``port``; the stack's own range is all spoken for, and only tansu connects to it),
and on a Unix socket in its own directory for kmon's ``psql``. It trusts local connections
and holds one database, ``tansu``, with tansu's schema applied. (tansu connects over TCP: its
PostgreSQL client takes a socket's path for a TLS server name and fails, even with TLS off.)

tansu 0.6.0 does not create its PostgreSQL schema, and its crate does not ship it: the schema
is in tansu's repository (``etc/initdb.d/010-schema.sql`` at tag ``v0.6.0``), which tansu's own
set-up mounts into PostgreSQL's ``initdb.d``. The user passes that file (``--pg-schema``,
``KMON_TANSU_PG_SCHEMA``); kmon never writes a schema of its own, so what the report finds is
about tansu's schema, not ours.

The server is PostgreSQL 16.2 from the ``pgserver`` wheel (PyPI; ``pg_bin``). PostgreSQL
refuses to run as root: when kmon runs as root, the server runs as the ``postgres`` user
(Debian's PostgreSQL packages create it; ``useradd postgres`` otherwise), which then owns the
server's directory and must be able to read the wheel's binaries.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import socket
import subprocess
import time
from pathlib import Path

from kmon.env import SettingError
from kmon.local import procs

DATABASE = "tansu"
USER = "postgres"  # the superuser initdb creates, and the account the server runs as
SCHEMA_ENV = "KMON_TANSU_PG_SCHEMA"


class PostgresError(RuntimeError):
    """The PostgreSQL server did not start, stop or take the schema as asked."""


def pg_bin(name: str) -> str:
    """A PostgreSQL 16 program (``initdb``, ``pg_ctl``, ``psql``) of the ``pgserver`` wheel.

    Not Debian's PostgreSQL: Debian 12 ships 15, which rejects tansu 0.6.0's SQL (a subquery in
    FROM without an alias, allowed from 16 on, in its latest-offset query), so every
    ListOffsets for the latest offset would fail (docs/brokers/tansu.md)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise SettingError("the pgserver wheel (PostgreSQL 16) is not installed: run `make "
                           "setup`; tansu's postgres engine runs on it")
    path = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name
    if not path.is_file():
        raise SettingError(f"PostgreSQL's {name} not found at {path}")
    return str(path)


def schema_file(path: str | os.PathLike[str] | None = None) -> Path:
    """tansu's PostgreSQL schema: ``path``, else ``$KMON_TANSU_PG_SCHEMA``; it must exist."""
    raw = path or os.environ.get(SCHEMA_ENV)
    if not raw:
        raise SettingError(
            f"--pg-schema (or {SCHEMA_ENV}): tansu's postgres engine needs tansu's schema, which "
            "its crate does not ship: etc/initdb.d/010-schema.sql of tansu's repository at tag "
            "v0.6.0")
    schema = Path(raw).expanduser()
    if not schema.is_file():
        raise SettingError(f"--pg-schema: {schema}: no such file")
    return schema


class LocalPostgres:
    """One PostgreSQL server under ``root``, its socket in ``root`` too."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def port_path(self) -> Path:
        return self.root / "port"

    @property
    def port(self) -> int:
        """The server's port (0 before it was first started)."""
        try:
            return int(self.port_path.read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def _choose_port(self) -> int:
        """The kept port, unless something else took it while the server was down."""
        port = self.port
        if port and not procs.port_in_use(port):
            return port
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.port_path.write_text(f"{port}\n")
        return port

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def url(self) -> str:
        """tansu's storage URL (TLS off: a loopback server without certificates)."""
        return f"postgres://{USER}@127.0.0.1:{self.port}/{DATABASE}?sslmode=disable"

    # --- running the programs ------------------------------------------------------------

    def _as_owner(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", USER, "--", *cmd] if os.geteuid() == 0 else cmd

    def _run(self, cmd: list[str], what: str) -> str:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise PostgresError(f"PostgreSQL: {what} failed ({done.returncode}): "
                                f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done.stdout

    def psql(self, *args: str, database: str = "postgres") -> str:
        return self._run([pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.root),
                          "-p", str(self.port), "-U", USER, "-d", database, *args],
                         f"psql {' '.join(args)[:80]}")

    # --- lifecycle -----------------------------------------------------------------------

    def pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return None
        pid = int(first) if first.strip().isdigit() else None
        return pid if pid is not None and procs.is_alive(pid) else None

    def up(self, timeout: float = 60.0) -> None:
        """Create the server's directory (once) and start it unless it runs."""
        if self.pid() is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(USER)
            except KeyError:
                raise SettingError(f"PostgreSQL does not run as root, and there is no user "
                                   f"{USER!r} to run it as: `useradd {USER}`") from None
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        if not (self.data_dir / "PG_VERSION").is_file():
            self._run(self._as_owner([pg_bin("initdb"), "-D", str(self.data_dir), "-U", USER,
                                      "--auth=trust", "-E", "UTF8", "--no-instructions"]),
                      "initdb")
        options = f"-k {self.root} -p {self._choose_port()} -c listen_addresses=127.0.0.1"
        self._run(self._as_owner([pg_bin("pg_ctl"), "-D", str(self.data_dir), "-l",
                                  str(self.log_path), "-o", options, "-w", "-t",
                                  str(int(timeout)), "start"]),
                  f"pg_ctl start (log: {self.log_path})")

    def fresh_database(self, schema: Path) -> None:
        """Database ``tansu`` dropped if there, created empty, and tansu's schema applied."""
        self.psql("-c", f"drop database if exists {DATABASE} with (force)")
        self.psql("-c", f"create database {DATABASE}")
        self.psql("-f", str(schema), database=DATABASE)

    def has_database(self) -> bool:
        out = self.psql("-t", "-A", "-c",
                        f"select count(*) from pg_database where datname = '{DATABASE}'")
        return out.strip() == "1"

    def down(self, timeout: float = 30.0) -> None:
        if self.pid() is None:
            return
        self._run(self._as_owner([pg_bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast",
                                  "-w", "-t", str(int(timeout)), "stop"]), "pg_ctl stop")
        deadline = time.monotonic() + timeout
        while self.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.1)

