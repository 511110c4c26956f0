"""`kmon probe --check`: can the probe reach its clusters with its settings?

The chart's `helm test` runs it with the probe's own settings file and environment, so a
wrong bootstrap address, TLS trust or SASL credential shows at install time, not as a probe
that silently never writes. It asks each cluster for metadata through the same librdkafka
settings the probe's admin client uses (security included): reaching a broker is not enough, the
handshake and authentication must succeed too.
"""

from __future__ import annotations

from typing import Any

TIMEOUT_S = 20.0  # a cold TLS + SCRAM handshake on a loaded cluster takes a few seconds


def _metadata(settings: dict[str, Any], topic: str | None) -> str:
    """One line about the cluster ``settings`` reach; raises KafkaException when it cannot."""
    from confluent_kafka import Producer

    producer = Producer({**settings, "logger": _silent()})
    meta = producer.list_topics(timeout=TIMEOUT_S)
    line = f"{len(meta.brokers)} broker(s), cluster id {meta.cluster_id}"
    if topic is not None:
        line += f", topic {topic} " + ("exists" if topic in meta.topics else
                                        "missing (the probe creates it)")
    return line


def _silent() -> Any:
    # librdkafka logs every failed connection attempt; the one failure that matters is reported
    # below, once, with the cluster it concerns.
    import logging

    logger = logging.getLogger("kmon.probes.check")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def check(cfg: Any) -> int:
    """0 when the probed and the events clusters both answer, else 1 (message on stdout)."""
    from confluent_kafka import KafkaException

    targets = [("probed cluster", cfg.client_settings("admin"), None)]
    if cfg.events_enabled:
        targets.append(("events cluster", cfg.client_settings("events"), cfg.events_topic))
    status = 0
    for what, settings, topic in targets:
        where = settings.get("bootstrap.servers")
        try:
            print(f"kmon probe --check: {what} {where}: {_metadata(settings, topic)}", flush=True)
        except KafkaException as e:
            print(f"kmon probe --check: {what} {where}: unreachable: {e}", flush=True)
            status = 1
    return status
