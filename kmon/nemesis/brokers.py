"""A Kafka-compatible broker nobody here wrote, judged by the detection matrix's machinery:
``kmon nemesis broker-report --broker tansu`` (``make broker-report BROKER=tansu``).

The probe's clients talk to one local tansu broker (``kmon.local.tansu``); its op events go
to the local Apache Kafka cluster, where the matrix's monitor reads them, so the monitor never
depends on the broker under test. The broker runs behind a Toxiproxy proxy of its own
(``LocalTansu(proxied=True)``), so every client connection can be degraded. For each storage
engine: a healthy row, the broker paused (SIGSTOP), killed and started again on its storage,
and three network faults on every connection (latency, answers lost while requests still
arrive, connections reset), each judged by the monitor and by ``kmon check`` on the same
history. Rows have no expectation: the report states what
was found (``allowed`` is every type, so no verdict fails), and docs/brokers/tansu.md says
what each finding is.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kmon.checker.anomaly import ANOMALY_TYPES, UNSEEN
from kmon.nemesis.base import Fault
from kmon.nemesis.network import NetworkFault
from kmon.nemesis.scenarios import Scenario

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.tansu import LocalTansu
    from kmon.local.toxiproxy import LocalToxiproxy
    from kmon.nemesis.matrix import Matrix, RowResult

EVERYTHING = (*ANOMALY_TYPES, UNSEEN)
PAUSE_S = 10.0  # held paused; longer than the clients' request timeouts' first retries
DOWN_S = 5.0  # killed, then started again on the same storage
NET_S = 10.0  # a network fault held
PROXY = "tansu"  # the Toxiproxy proxy in front of the broker


def tansu_of(cluster: LocalCluster, storage: str = "memory",
             pg_schema: Path | None = None) -> LocalTansu:
    """The tansu broker of the cluster's local stack (same home and port base), behind its
    Toxiproxy proxy."""
    from kmon.local.tansu import LocalTansu

    return LocalTansu(home=cluster.home, port_base=cluster.ports.base, storage=storage,
                      pg_schema=pg_schema, proxied=True)


class _TansuFault(Fault):
    """A process fault on the one tansu broker."""

    def __init__(self, tansu: LocalTansu) -> None:
        self.tansu = tansu
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {"broker": "tansu", "storage": self.tansu.storage}


class TansuPause(_TansuFault):
    """SIGSTOP the tansu broker; SIGCONT to undo."""

    kind = "pause"

    def _start(self) -> None:
        self.record.info["pid"] = self.tansu.pause()
        self.mark("tansu paused")

    def _stop(self) -> None:
        if self.tansu.status().state == "paused":
            self.tansu.resume()
            self.mark("tansu resumed")


class TansuCrash(_TansuFault):
    """SIGKILL the tansu broker; undone by starting it again with the same storage."""

    kind = "crash"

    def _start(self) -> None:
        self.record.info["killed_pid"] = self.tansu.kill()
        self.mark("tansu killed")

    def _stop(self) -> None:
        if self.tansu.status().state == "stopped":
            self.record.info["new_pid"] = self.tansu.start()
            self.mark("tansu started again on its storage")


class TansuNetwork(NetworkFault):
    """A network fault on every client connection to tansu (its one proxy)."""

    def _resolve(self) -> list[int | str]:
        return [PROXY]

    def params(self) -> dict[str, Any]:
        return {"broker": "tansu", "kind": self.net_kind, "stream": self.stream,
                **self.settings}


def _net(kind: str, stream: str = "downstream", **settings: int) -> Any:
    def make(c: LocalCluster, p: LocalToxiproxy, prefix: str) -> Fault:
        return TansuNetwork(p, kind, stream=stream, **settings)
    return make


NOTES = {
    "memory": "kept in the broker's memory: a restart starts from nothing",
    "sqlite": "a SQLite file in the broker's directory",
    "postgres": "a PostgreSQL database, tansu's own schema",
}


def tansu_scenarios(storage: str) -> tuple[Scenario, ...]:
    """The rows for one storage engine: healthy, paused, killed and started again, and three
    network faults."""
    where = NOTES.get(storage, storage)
    return (
        Scenario(f"tansu-{storage}-healthy", "tansu", None, allowed=EVERYTHING,
                 note=f"no fault; storage {storage} ({where})"),
        Scenario(f"tansu-{storage}-pause", "tansu",
                 lambda c, p, prefix: TansuPause(tansu_of(c, storage)), duration=PAUSE_S,
                 allowed=EVERYTHING, note=f"SIGSTOP the broker for {PAUSE_S:.0f} s; storage "
                 f"{storage}"),
        Scenario(f"tansu-{storage}-crash", "tansu",
                 lambda c, p, prefix: TansuCrash(tansu_of(c, storage)), duration=DOWN_S,
                 allowed=EVERYTHING, note=f"SIGKILL the broker, start it again {DOWN_S:.0f} s "
                 f"later on the same storage ({storage})"),
        Scenario(f"tansu-{storage}-net-latency", "tansu",
                 _net("latency", "both", latency_ms=300, jitter_ms=100), duration=NET_S,
                 allowed=EVERYTHING, note=f"300 +/- 100 ms each way on every client connection "
                 f"for {NET_S:.0f} s; storage {storage}"),
        Scenario(f"tansu-{storage}-net-timeout", "tansu", _net("timeout"), duration=NET_S / 2,
                 allowed=EVERYTHING, note=f"answers stop for {NET_S / 2:.0f} s while requests "
                 f"still arrive (retries of applied writes); storage {storage}"),
        Scenario(f"tansu-{storage}-net-reset", "tansu", _net("reset", timeout_ms=200),
                 duration=NET_S, allowed=EVERYTHING, note=f"every client connection reset "
                 f"after 200 ms for {NET_S:.0f} s; storage {storage}"),
    )


def fresh_broker(tansu: LocalTansu, proxy: LocalToxiproxy) -> None:
    """``tansu`` started from empty storage (an earlier report's SQLite file removed, with
    the write-ahead log a killed broker leaves beside it; the database recreated with tansu's
    schema), behind the proxy ``tansu``."""
    tansu.down()
    for suffix in ("", "-wal", "-shm"):
        tansu.db_path.with_name(tansu.db_path.name + suffix).unlink(missing_ok=True)
    if tansu.storage == "postgres":
        from kmon.local.postgres import schema_file

        tansu.postgres.up()
        tansu.postgres.fresh_database(schema_file(tansu.pg_schema))
    proxy.add_proxy(PROXY, tansu.port, tansu.listen_port)
    tansu.up()


def run_tansu(m: Matrix, storages: Sequence[str],
              pg_schema: Path | None = None) -> list[RowResult]:
    """Every storage engine's rows, each engine on a fresh broker; settle and collect."""
    for storage in storages:
        tansu = tansu_of(m.cluster, storage, pg_schema)
        fresh_broker(tansu, m.proxy)
        try:
            healthy, *faults = tansu_scenarios(storage)
            m.run_quiet([healthy])
            for s in faults:
                m.run_fault(s)
        finally:
            tansu.down()
            m.proxy.remove_proxy(PROXY)
    m.settle()
    return m.collect()


REGENERATE = ("make tansu   # once: builds tansu 0.6.0 with cargo (about 25 minutes)\n"
              "kmon cluster up && kmon nemesis proxy up   # the local Kafka stack: op events\n"
              "kmon nemesis broker-report --broker tansu --storage memory,sqlite,postgres \\\n"
              "    --pg-schema TANSU/etc/initdb.d/010-schema.sql --out docs/brokers/tansu-runs.md\n"
              "# or: make broker-report BROKER=tansu TANSU_PG_SCHEMA=TANSU/etc/initdb.d/"
              "010-schema.sql\n# (TANSU: a clone of github.com/tansu-io/tansu at tag v0.6.0; "
              "without the schema, the memory and sqlite rows only)")


def write_report(path: Path, rows: Sequence[RowResult], took_s: float, version: str) -> None:
    from kmon.nemesis.matrix import render_details, render_table

    text = (
        f"# tansu {version}: kmon's runs\n\n"
        "Generated; regenerate with:\n\n```sh\n" + REGENERATE + "\n```\n\n"
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {len(rows)} rows, "
        f"{took_s / 60:.1f} min. Each row ran the real probe against one tansu broker "
        "(replication factor 1, explicit partition placement off), its op events going to "
        "the local Apache Kafka cluster, where one monitor watched every row "
        "(`kmon.nemesis.brokers`). Rows carry no expectation (`verdict` is always pass): "
        "the columns **monitor reported** and **`kmon check` on the same history** are the "
        "findings, and [tansu.md](tansu.md) says what each one is: a bug, a missing feature "
        "or a configuration trap.\n\n"
        + render_table(rows) + "\n## Per row\n\n" + render_details(rows))
    path.write_text(text)
