"""Broker settings of the local cluster: kmon's defaults, user overrides, and their checks.

Overrides are checked by name (and, for numbers and booleans, by value) against the table of
Kafka's own settings that set-up asked the jars for, so a typo fails before any JVM starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from kmon.env import SettingError
from kmon.local.ports import BROKER_IDS, Ports

# Settings the harness derives from the layout (ids, ports, paths); overriding them would break
# the harness's own view of the cluster.
RESERVED = frozenset({
    "node.id", "broker.id", "process.roles", "listeners", "advertised.listeners",
    "controller.listener.names", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "inter.broker.listener.name", "listener.security.protocol.map", "log.dirs", "log.dir",
    "metadata.log.dir",
})

# kmon's broker defaults. Each differs from Kafka's default, for the reason beside it.
DEFAULTS: dict[str, str] = {
    # Auto-created topics get the same durability as the ones kmon creates.
    "default.replication.factor": "3",
    # acks=all then means "on at least two brokers"; also the floor for __consumer_offsets.
    "min.insync.replicas": "2",
    # Internal topics keep RF=3 (Kafka's default) but need far fewer than 50 partitions on a
    # laptop-sized cluster: creating 50 partitions x 3 replicas slows every first use.
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.num.partitions": "3",
    # Share groups' acquisition locks may be as short as 1 s (Kafka's floor is 15 s), so that
    # probes stalling past the lock and matrix rows take seconds, not minutes. Each group's
    # lock is still 30 s unless its config says otherwise.
    "group.share.min.record.lock.duration.ms": "1000",
    # A killed or paused broker is fenced (and loses its leaderships) after 6 s instead of 9 s,
    # and a restarted one may re-register that much sooner: shorter fault cycles in tests.
    # Heartbeats every second (not 2 s), so fencing still takes six missed ones in a row, not
    # a single slow heartbeat on a busy 2-core machine.
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    # Consumer groups start at once instead of waiting 3 s for more members (tests, probes).
    "group.initial.rebalance.delay.ms": "0",
    # Three JVMs share 2 cores: fewer request threads than Kafka's server-sized defaults.
    "num.network.threads": "2",
    "num.io.threads": "2",
}

_INT_TYPES = {"INT", "LONG", "SHORT"}


def load_config_defs(path: Path) -> dict[str, str]:
    """``name -> type`` for every broker setting Kafka knows (written by set-up)."""
    if not path.is_file():
        raise SettingError(f"Kafka's settings table is missing ({path}): run `kmon setup`")
    defs = {}
    for line in path.read_text().splitlines():
        name, _, kind = line.partition("\t")
        if name:
            defs[name] = kind
    return defs


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["key=value", ...]`` (from ``--set``) into a dict, rejecting malformed items."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingError(f"broker setting {item!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style ``.properties`` file (``key=value`` lines, ``#`` comments)."""
    if not path.is_file():
        raise SettingError(f"broker settings file not found: {path}")
    out = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise SettingError(f"{path}:{number}: not key=value: {raw!r}")
        out[key.strip()] = value.strip()
    return out


def validate_overrides(overrides: Mapping[str, str], defs: Mapping[str, str]) -> None:
    """Fail on the first override Kafka does not know, the harness owns, or cannot parse."""
    for key, value in overrides.items():
        if key in RESERVED:
            raise SettingError(f"broker setting {key!r} is set by kmon's cluster harness")
        # Per-listener settings (listener.name.<l>.<setting>) are legal for any listener name.
        if key.startswith("listener.name."):
            continue
        kind = defs.get(key)
        if kind is None:
            raise SettingError(f"unknown Kafka broker setting {key!r}")
        if kind in _INT_TYPES:
            try:
                int(value)
            except ValueError:
                raise SettingError(f"broker setting {key}={value!r}: expected an integer") from None
        elif kind == "DOUBLE":
            try:
                float(value)
            except ValueError:
                raise SettingError(f"broker setting {key}={value!r}: expected a number") from None
        elif kind == "BOOLEAN" and value.lower() not in ("true", "false"):
            raise SettingError(f"broker setting {key}={value!r}: expected true or false")


# The listener that Toxiproxy forwards to (see kmon.local.ports). It advertises the proxies, so a
# client bootstrapping through a proxy is handed proxy addresses for every broker.
PROXIED_LISTENER = "PROXIED"

# The listener for clients configured as in production (see kmon.local.ports): TLS with the
# local CA (kmon.local.tls) and SCRAM-SHA-512 logins, required; credentials live in the KRaft
# metadata log (``LocalCluster.create_scram_user``). No authorizer: an authenticated user may do
# anything, as everyone may on PLAINTEXT, which the harness and the other tests keep using.
SASL_SSL_LISTENER = "SASL_SSL"
SCRAM_MECHANISM = "SCRAM-SHA-512"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def sasl_ssl_properties(keystore: Path) -> dict[str, str]:
    """The SASL_SSL listener's own settings (``listener.name.sasl_ssl.*``): a PEM key store
    file with the broker's key and certificate chain, SCRAM-SHA-512 its only mechanism."""
    prefix = f"listener.name.{SASL_SSL_LISTENER.lower()}."
    return {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(keystore),
        f"{prefix}sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"{prefix}{SCRAM_MECHANISM.lower()}.sasl.jaas.config": _SCRAM_LOGIN,
    }


def broker_properties(
    node_id: int,
    ports: Ports,
    data_dir: Path,
    overrides: Mapping[str, str],
    proxied_listener: bool = False,
    sasl_ssl_keystore: Path | None = None,
) -> dict[str, str]:
    """The full ``server.properties`` of one combined broker+controller node.

    ``proxied_listener``: also listen on the PROXIED port, advertising the Toxiproxy proxy
    (``LocalCluster`` turns it on; off here, the layout is the plain one). Broker-to-broker
    traffic always stays on PLAINTEXT, so proxy faults reach clients only.
    ``sasl_ssl_keystore``: also listen on the SASL_SSL port with this PEM key store.
    """
    voters = ",".join(f"{n}@127.0.0.1:{ports.controller(n)}" for n in BROKER_IDS)
    listeners = [
        f"PLAINTEXT://127.0.0.1:{ports.broker(node_id)}",
        f"CONTROLLER://127.0.0.1:{ports.controller(node_id)}",
    ]
    advertised = [f"PLAINTEXT://127.0.0.1:{ports.broker(node_id)}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    if proxied_listener:
        listeners.append(f"{PROXIED_LISTENER}://127.0.0.1:{ports.proxied_listener(node_id)}")
        advertised.append(f"{PROXIED_LISTENER}://127.0.0.1:{ports.proxy(node_id)}")
        protocols.append(f"{PROXIED_LISTENER}:PLAINTEXT")
    if sasl_ssl_keystore is not None:
        address = f"{SASL_SSL_LISTENER}://127.0.0.1:{ports.sasl_ssl(node_id)}"
        listeners.append(address)
        advertised.append(address)
        protocols.append(f"{SASL_SSL_LISTENER}:SASL_SSL")
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        # A static quorum of the three nodes: no dynamic voter bootstrap needed.
        "controller.quorum.voters": voters,
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(data_dir),
    }
    if sasl_ssl_keystore is not None:
        props.update(sasl_ssl_properties(sasl_ssl_keystore))
    props.update(DEFAULTS)
    props.update(overrides)
    return props


def render_properties(props: Mapping[str, str]) -> str:
    lines = ["# Generated by kmon; edit the overrides (kmon cluster up --set), not this file."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"
