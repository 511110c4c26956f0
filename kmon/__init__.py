"""kmon: an online anomaly monitor for Kafka and Kafka-compatible clusters."""

from kmon._build import refuse_stale_build

__version__ = "0.1.0"

refuse_stale_build()  # before any compiled module loads
