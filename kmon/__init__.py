"""kmon: an online anomaly monitor for Kafka and Kafka-compatible clusters."""

__version__ = "0.1.0"
