"""Client settings and lifecycles: safe defaults, user overrides, bounded closes.

Safe by default, as in Jepsen's Kafka tests (acks=all, idempotence, read_committed, earliest,
no auto-commit), every one overridable through the config's client sections so users can
probe the settings they actually run; the checker must then be told the isolation level.
Every setting below that is not librdkafka's default says why it is set.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kmon.history.model import START_CLIENT, START_COMMITTED, START_RESET, Start
from kmon.probes.config import ConfigError, ProbeConfig
from kmon.probes.metrics import ProbeIdentity
from kmon.probes.stacks import stack_of

log = logging.getLogger("kmon.probes")
# librdkafka's own log lines (refused connections while a broker is down, ...) go to Python
# logging at debug level instead of stderr.
librdkafka_log = logging.getLogger("kmon.probes.librdkafka")


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def producer_defaults(cfg: ProbeConfig) -> dict[str, Any]:
    return {
        "acks": "all",  # librdkafka's default too; explicit: every verdict assumes it
        "enable.idempotence": True,  # retries must not write a record twice
        # Give up on a record after the op timeout, so an op's outcome is known (or info) in
        # bounded time instead of retrying for librdkafka's default 300 s.
        "message.timeout.ms": _ms(cfg.op_timeout),
        "linger.ms": 0,  # one record per send op: nothing to batch, do not wait
        # A transaction left open by a crashed client holds back read_committed consumers
        # (the last stable offset) until it times out: keep that short (default 60 s).
        "transaction.timeout.ms": _ms(max(cfg.op_timeout * 3, 10.0)),
    }


def consumer_defaults(cfg: ProbeConfig) -> dict[str, Any]:
    return {
        "isolation.level": "read_committed",  # librdkafka's default; explicit: G1a depends on it
        "auto.offset.reset": "earliest",  # a new group must see the whole log (default: latest)
        "enable.auto.commit": False,  # commit only what an op read, when it read it
        # Notice a crashed group member quickly (default 45 s), so subscribe-mode rebalances
        # after crash ops do not stall every consumer of the group for long.
        "session.timeout.ms": _ms(max(cfg.op_timeout, 6.0)),
        "heartbeat.interval.ms": _ms(max(cfg.op_timeout, 6.0) / 3),
    }


def _consumer_settings(cfg: ProbeConfig) -> dict[str, Any]:
    """The probe's consumer defaults under the user's ``consumer`` settings."""
    return {**consumer_defaults(cfg), **cfg.client_settings("consumer")}


def identity(cfg: ProbeConfig) -> ProbeIdentity:
    """What kmon_probe_info exports: the isolation level the consumers really read at."""
    isolation = str(_consumer_settings(cfg)["isolation.level"]).lower()
    return ProbeIdentity(cluster=cfg.cluster, probe=cfg.probe_id, isolation=isolation)


def offset_reset(cfg: ProbeConfig) -> str | None:
    """Where the probe's consumers start a partition nobody committed an offset for:
    ``"earliest"``, ``"latest"``, or None to let librdkafka apply ``auto.offset.reset`` (e.g.
    ``error``)."""
    # "latest" when unset: librdkafka's default
    value = str(_consumer_settings(cfg).get("auto.offset.reset", "latest")).lower()
    if value in ("smallest", "earliest", "beginning"):
        return "earliest"
    if value in ("largest", "latest", "end"):
        return "latest"
    return None


def start_offsets(consumer: Consumer, partitions: list[TopicPartition], reset: str | None,
                  timeout: float) -> list[tuple[TopicPartition, Start]]:
    """``partitions`` with the absolute offsets to assign them at, each with where it starts
    (``Start``): its committed offset, else the log start (``reset`` ``"earliest"``) or end
    (``"latest"``); with ``reset`` None and nothing committed, no offset (librdkafka applies
    ``auto.offset.reset``, e.g. ``error``).

    Assigned without an offset, a partition is positioned by librdkafka's own committed-offset
    and log-start queries, and those race with a later assign or seek of the same partition
    (librdkafka 2.16): the answer to a query made for the previous assignment restarts the
    partition from the log start although an offset is committed, and a log-start query
    retried on a timer fires after a seek and moves the consumer back. Either rewinds it
    silently, which the checker rightly reports as a nonmonotonic poll. Given absolute offsets,
    librdkafka queries nothing. ``committed`` waits out transactions whose offset commits are
    pending, up to ``timeout``; errors raise ``KafkaException``. The probe's ``start_positions:
    client`` setting skips all this, to let the races show.
    """
    found = consumer.committed(partitions, timeout=timeout)
    out: list[tuple[TopicPartition, Start]] = []
    for tp in found:
        if tp.error is not None:
            raise KafkaException(tp.error)
        if tp.offset >= 0:
            out.append((tp, Start(tp.offset, START_COMMITTED)))
        elif reset is not None:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                    timeout=timeout, cached=False)
            tp.offset = lo if reset == "earliest" else hi
            out.append((tp, Start(tp.offset, START_RESET)))
        else:
            out.append((tp, Start(None, START_CLIENT)))
    return out


def admin_defaults(cfg: ProbeConfig) -> dict[str, Any]:
    return {}


def _logging(extra_error_cb: Callable[[Any], None] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"logger": librdkafka_log}
    if extra_error_cb is not None:
        # Global errors (all brokers down, ...) are counted; ops see their own errors.
        out["error_cb"] = extra_error_cb
    return out


def producer_config(
    cfg: ProbeConfig, client_id: str, transactional_id: str | None = None,
    error_cb: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    conf = {**producer_defaults(cfg), **cfg.client_settings("producer")}
    conf["client.id"] = client_id
    if transactional_id is not None:
        conf["transactional.id"] = transactional_id
    else:
        conf.pop("transaction.timeout.ms", None)  # only meaningful for transactional producers
    conf.update(_logging(error_cb))
    return conf


def consumer_config(
    cfg: ProbeConfig, client_id: str, group_id: str,
    error_cb: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    conf = _consumer_settings(cfg)
    conf["client.id"] = client_id
    conf["group.id"] = group_id
    conf.update(_logging(error_cb))
    return conf


def share_consumer_config(
    cfg: ProbeConfig, client_id: str, group_id: str,
    error_cb: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """A share consumer's settings: the cluster's (``kafka.*``; the ``consumer.*`` ones are
    for consumer groups), explicit acknowledgement so that every ack is an op."""
    conf: dict[str, Any] = dict(cfg.clients["kafka"])
    conf["client.id"] = client_id
    conf["group.id"] = group_id
    conf["share.acknowledgement.mode"] = "explicit"
    conf.update(_logging(error_cb))
    return conf


def admin_config(cfg: ProbeConfig, client_id: str) -> dict[str, Any]:
    conf = {**admin_defaults(cfg), **cfg.client_settings("admin")}
    conf["client.id"] = client_id
    conf.update(_logging())
    return conf


def events_producer_config(cfg: ProbeConfig, error_cb: Callable[[Any], None] | None = None,
                           ) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "acks": "all",  # an op event is evidence: it must survive a broker loss
        "enable.idempotence": True,  # ... and never be written twice, nor out of order
        # The bounded buffer: produce() raises BufferError instead of blocking when it is full,
        # and the emitter counts the drop.
        "queue.buffering.max.messages": cfg.events_buffer,
        "queue.buffering.max.kbytes": 1048576,  # 1 GiB: the message count is the bound
        "linger.ms": 20,  # batch events a little: they come in bursts of invoke+completion
        "compression.type": "lz4",  # op events are repetitive; a cheap 3-5x
        # Keep retrying through a failover for a while (default 300 s is fine too); an event
        # that still fails is counted as dropped.
        "message.timeout.ms": 120000,
    }
    conf.update(cfg.client_settings("events"))
    conf["client.id"] = f"kmon-probe-{cfg.name}-events"
    conf.update(_logging(error_cb))
    return conf


def validate(cfg: ProbeConfig) -> None:
    """Let librdkafka vet every client config now; the error names the offending setting."""
    checks: list[tuple[str, Callable[[ProbeConfig], Any]]] = [
        ("producer", lambda c: Producer(producer_config(c, "kmon-validate"))),
        ("consumer", lambda c: Consumer(consumer_config(c, "kmon-validate", "kmon-validate"))),
        ("admin", lambda c: AdminClient(admin_config(c, "kmon-validate"))),
    ]
    # The transactional producer is built only for txn ops: without them, settings it cannot
    # take (idempotence off, acks=1: the unclean and idempotence-off presets) are fine.
    if cfg.txn_share > 0:
        checks.insert(1, ("producer", lambda c: Producer(
            producer_config(c, "kmon-validate", "kmon-validate"))))
    if cfg.events_enabled:
        checks.append(("events.producer", lambda c: Producer(events_producer_config(c))))
    for section, make in checks:
        error = _try(make, cfg)
        if error is not None:
            raise ConfigError(_culprit(cfg, section, make), f"rejected by librdkafka: {error}")


def _try(make: Callable[[ProbeConfig], Any], cfg: ProbeConfig) -> str | None:
    try:
        client = make(cfg)
    except (KafkaException, ValueError, TypeError) as e:
        return str(e.args[0].str() if e.args and hasattr(e.args[0], "str") else e)
    close_quietly(client, 1.0)
    return None


_BASES = {"producer": ("kafka", "producer"), "consumer": ("kafka", "consumer"),
          "admin": ("kafka", "admin"),
          "events.producer": ("kafka", "events.kafka", "events.producer")}


def _culprit(cfg: ProbeConfig, section: str, make: Callable[[ProbeConfig], Any]) -> str:
    """The user setting that makes ``make`` fail on its own (librdkafka's message may name an
    alias, e.g. request.required.acks for acks); the section when none does alone."""
    for sec in _BASES[section]:
        for prop, value in cfg.clients[sec].items():
            if prop == "bootstrap.servers":
                continue
            alone = copy.copy(cfg)
            alone.clients = {s: ({prop: value} if s == sec else {}) for s in cfg.clients}
            alone.clients["kafka"].setdefault("bootstrap.servers", "localhost:9092")
            if _try(make, alone) is not None:
                return f"{sec}.{prop}"
    return section + ".*"


class Hung(Exception):
    """A client call outlived its own timeout (librdkafka #5456: send_offsets_to_transaction
    can ignore its timeout while a coordinator is down). ``stack``: where the call's thread
    was when it was given up on ("" if unknown)."""

    def __init__(self, message: str, stack: str = "") -> None:
        super().__init__(message)
        self.stack = stack


# What a ``Hung`` says, and so an op's error after one: read back by history checks.
HUNG_TEXT = "did not return within"


def bounded(fn: Callable[..., Any], *args: Any, timeout: float, name: str,
            late: Callable[[], None] | None = None) -> Any:
    """``fn(*args)`` in a helper thread; raises ``Hung`` if it has not returned in ``timeout``.

    The abandoned call keeps its client alive (the thread holds a reference), so the client
    must never be used or closed again: destroying a handle under a call in progress is unsafe.
    ``late``, if given, runs in the helper thread once an abandoned call has returned (to close
    the client then); never when ``bounded`` returned or raised the call's own error.
    """
    box: dict[str, Any] = {}
    lock = threading.Lock()

    def call() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:
            box["error"] = e
        with lock:
            box["done"] = True
            abandoned = "abandoned" in box
        if abandoned and late is not None:
            late()

    t = threading.Thread(target=call, name=f"kmon-probe-{name}", daemon=True)
    t.start()
    t.join(timeout)
    with lock:  # decides, once, between the call's result and Hung (and so ``late``)
        if "done" not in box:
            box["abandoned"] = True
            raise Hung(f"{name} {HUNG_TEXT} {timeout:g}s", stack_of(t))
    if "error" in box:
        raise box["error"]
    return box.get("value")


def close_quietly(client: Any, timeout: float) -> bool:
    """Close ``client`` in a helper thread, waiting at most ``timeout`` seconds.

    A close can block (a consumer leaving its group while the coordinator is down, a producer
    flushing to a dead broker); the workload must not. Returns False if the close was
    abandoned (its thread finishes, or not, in the background).
    """
    if client is None:
        return True

    def close() -> None:
        try:
            if isinstance(client, Producer):
                client.purge(in_queue=True, in_flight=False)
                client.flush(0)
            close_fn = getattr(client, "close", None)
            if close_fn is not None:
                close_fn()
        except Exception as e:  # a fatal producer raises on close; it is gone either way
            log.debug("close of %r raised %s", client, e)

    t = threading.Thread(target=close, name="kmon-probe-close", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        log.warning("client close took longer than %.1fs; abandoned", timeout)
        return False
    return True
