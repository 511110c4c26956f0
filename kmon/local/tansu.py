"""tansu, a Kafka-compatible broker nobody here wrote, on loopback: built, started, faulted.

tansu (crates.io ``tansu``, Apache-2.0) is one Rust process speaking the Kafka protocol over a
pluggable storage engine. kmon judges it the way it judges Kafka: the probe writes to it and
reads it back, while its op events go to the Apache Kafka cluster, so the monitor never
depends on the broker under test (docs/brokers/tansu.md).

The binary is built once by ``cargo install`` of a pinned version, with the storage features
the engines below need, into ``$KMON_CACHE/tansu-<version>`` (``install()``; ``make tansu``,
outside ``make test``: about 25 minutes on 2 cores from nothing). tansu's default build has
none of them, and then serves a storage URL it cannot open from a null engine that
acknowledges every produce and stores nothing: the reason the features are pinned here.

Engines (``--storage``):

- ``memory``: ``memory://tansu/``, an in-process object store (tansu's ``dynostore``):
  everything is gone when the process dies;
- ``sqlite``: ``<KMON_HOME>/tansu/tansu.db`` (tansu's ``libsql``), kept across restarts;
- ``postgres``: database ``tansu`` of a PostgreSQL server under ``<KMON_HOME>/tansu/postgres``
  (``kmon.local.postgres``), kept across restarts; tansu's schema is the user's to give, since
  its crate does not ship it.

State lives under ``<KMON_HOME>/tansu/``: ``broker.log``, ``pid``, ``storage`` (the engine the
running broker was started with) and the engines' files. The broker listens on one port
(``Ports.tansu``) and advertises it; ``proxied``, it listens on ``Ports.tansu_direct`` and
advertises ``Ports.tansu``, where the Toxiproxy proxy ``tansu`` forwards to it, so every client
connection passes the proxy and network faults reach them all.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kmon import env
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.ports import Ports
from kmon.local.postgres import LocalPostgres, schema_file

VERSION = "0.6.0"
# The storage engines' cargo features (tansu-storage's lib.rs matches the URL scheme on them).
FEATURES = ("dynostore", "libsql", "postgres")
STORAGES = ("memory", "sqlite", "postgres")
DB_FILE = "tansu.db"  # the SQLite engine's, in the broker's directory
CLUSTER_ID = "kmon-tansu"
MARKER = "--kafka-cluster-id"  # in the broker's command line: tells it from other processes

Log = Callable[[str], None]


class TansuError(RuntimeError):
    """The tansu broker did not build, start or stop as asked."""


# ---------------------------------------------------------------------------------------------
# Installation


def root_dir(cache: Path | None = None) -> Path:
    return (cache or env.kmon_cache()) / f"tansu-{VERSION}"


def _stamp(cache: Path | None) -> Path:
    return root_dir(cache) / ".features"


def find_binary(cache: Path | None = None) -> Path | None:
    """The installed ``tansu`` of the pinned version and features, else None."""
    binary, stamp = root_dir(cache) / "bin" / "tansu", _stamp(cache)
    if binary.is_file() and stamp.is_file() and stamp.read_text().split() == list(FEATURES):
        return binary
    return None


def require_binary(cache: Path | None = None) -> Path:
    """``find_binary``'s answer, or a ``SettingError`` saying how to build it."""
    binary = find_binary(cache)
    if binary is None:
        raise SettingError(f"tansu {VERSION} is not built: run `make tansu` (cargo install, "
                           "about 25 minutes once)")
    return binary


def install(cache: Path | None = None, log: Log = print) -> Path:
    """``cargo install`` the pinned tansu with ``FEATURES`` into ``root_dir`` (once).

    The build directory is kept in the cache (``tansu-build``): an interrupted build resumes.
    """
    cache = cache or env.kmon_cache()
    root = root_dir(cache)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:  # several checkouts share the cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_binary(cache)
        if found is not None:
            log(f"tansu {VERSION}: cached at {found}")
            return found
        cargo = shutil.which("cargo")
        if cargo is None:
            raise SettingError("tansu: `cargo` not found; install Rust to build it")
        log(f"tansu {VERSION}: cargo install with {','.join(FEATURES)} (about 25 minutes on "
            "2 cores, once)")
        subprocess.run([cargo, "install", "tansu", "--version", VERSION, "--locked",
                        "--features", ",".join(FEATURES), "--root", str(root),
                        "--target-dir", str(cache / "tansu-build")], check=True)
        _stamp(cache).write_text(" ".join(FEATURES) + "\n")
    binary = find_binary(cache)
    assert binary is not None
    return binary


# ---------------------------------------------------------------------------------------------
# The broker


@dataclass(frozen=True)
class TansuStatus:
    state: str  # "running", "paused" or "stopped"
    pid: int | None
    port: int
    storage: str | None
    log: Path


class LocalTansu:
    """One tansu broker on 127.0.0.1 (node id 1: tansu has one node per cluster here)."""

    def __init__(self, home: str | os.PathLike[str] | None = None, port_base: int | None = None,
                 storage: str = "memory", cache: Path | None = None,
                 pg_schema: str | os.PathLike[str] | None = None, proxied: bool = False) -> None:
        if storage not in STORAGES:
            raise SettingError(f"--storage: must be one of {', '.join(STORAGES)}, not {storage!r}")
        self.root = env.kmon_home(home) / "tansu"
        ports = Ports(env.port_base(port_base))
        self.port = ports.tansu  # what clients reach, and what the broker advertises
        self.listen_port = ports.tansu_direct if proxied else ports.tansu
        self.proxied = proxied
        self.storage = storage
        self.cache = cache
        self.pg_schema = pg_schema
        self.postgres = LocalPostgres(self.root / "postgres")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "broker.log"

    @property
    def pid_path(self) -> Path:
        return self.root / "pid"

    @property
    def db_path(self) -> Path:
        """The SQLite engine's file."""
        return self.root / DB_FILE

    def storage_url(self) -> str:
        if self.storage == "sqlite":
            # tansu 0.6.0 takes a sqlite URL's host and path relative to its working directory
            # (``root``), even an absolute path: sqlite:///a/b opens <cwd>/a/b.
            return f"sqlite://{DB_FILE}"
        if self.storage == "postgres":
            return self.postgres.url()
        return "memory://tansu/"

    def command(self, binary: Path) -> list[str]:
        return [str(binary), "broker", MARKER, CLUSTER_ID,
                "--listener-url", f"tcp://127.0.0.1:{self.listen_port}",
                "--advertised-listener-url", f"tcp://127.0.0.1:{self.port}",
                "--storage-engine", self.storage_url()]

    def pid(self) -> int | None:
        return procs.read_pid(self.pid_path, MARKER)

    def last_storage(self) -> str | None:
        """The engine the broker last ran with (kept after it stops), or None."""
        try:
            name = (self.root / "storage").read_text().strip()
        except FileNotFoundError:
            return None
        return name if name in STORAGES else None

    def status(self) -> TansuStatus:
        pid = self.pid()
        state = "stopped" if pid is None else "paused" if procs.is_stopped(pid) else "running"
        running = self.last_storage() if pid is not None else None
        return TansuStatus(state, pid, self.port, running, self.log_path)

    def up(self, timeout: float = 60.0) -> int:
        """Start the broker unless it runs (with this engine), and wait until it answers a
        metadata request."""
        pid = self.pid()
        if pid is not None:
            running = self.last_storage()
            if running != self.storage:
                raise TansuError(f"tansu already runs with --storage {running}; "
                                 "`kmon cluster down --broker tansu` first")
            return pid
        return self.start(timeout)

    def start(self, timeout: float = 60.0) -> int:
        binary = require_binary(self.cache)
        if procs.port_in_use(self.listen_port):
            raise TansuError(f"port {self.listen_port} is taken: is another tansu or stack "
                             "running?")
        self.root.mkdir(parents=True, exist_ok=True)
        if self.storage == "postgres":
            self.start_postgres()
        pid = procs.spawn(self.command(binary), self.log_path, self.root,
                          {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        self.pid_path.write_text(f"{pid}\n")
        (self.root / "storage").write_text(self.storage + "\n")
        self.wait_serving(pid, timeout)
        return pid

    def start_postgres(self) -> None:
        """The postgres engine's server running, with database ``tansu`` (created with the
        user's schema the first time: a restart keeps what tansu stored)."""
        self.postgres.up()
        if not self.postgres.has_database():
            self.postgres.fresh_database(schema_file(self.pg_schema))

    def wait_serving(self, pid: int, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while not procs.port_in_use(self.listen_port) and procs.is_alive(pid):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)  # (a client connecting before it listens logs refusals)
        # Its own listener: the proxy in front of it may not exist yet.
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.listen_port}"})
        while True:
            if not procs.is_alive(pid):
                raise TansuError(f"tansu exited at start; its log:\n{procs.tail(self.log_path)}")
            try:
                if admin.list_topics(timeout=2.0).brokers:
                    return
            except Exception:  # not listening yet (KafkaException, or a transport error)
                pass
            if time.monotonic() > deadline:
                raise TansuError(f"tansu did not answer within {timeout:.0f} s; its log:\n"
                                 f"{procs.tail(self.log_path)}")
            time.sleep(0.5)

    def down(self, timeout: float = 10.0) -> None:
        pid = self.pid()
        if pid is not None and procs.is_stopped(pid):
            procs.signal_pid(pid, signal.SIGCONT)  # a paused process cannot shut down
        procs.terminate(self.pid_path, pid, timeout)
        self.postgres.down()  # whichever engine the broker ran with

    def _signal(self, sig: signal.Signals) -> int:
        pid = self.pid()
        if pid is None:
            raise TansuError("tansu is not running")
        procs.signal_pid(pid, sig)
        return pid

    def pause(self) -> int:
        return self._signal(signal.SIGSTOP)

    def resume(self) -> int:
        return self._signal(signal.SIGCONT)

    def kill(self) -> int:
        pid = self._signal(signal.SIGKILL)
        procs.wait_dead(pid, 10.0)
        self.pid_path.unlink(missing_ok=True)
        return pid
