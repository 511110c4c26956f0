"""The local stack: a real 3-broker Kafka 4.x cluster (KRaft), Prometheus, and their set-up.

- ``kmon.local.artifacts``: ``kmon setup`` (jars from Maven Central into ``KMON_CACHE``,
  Prometheus from Debian).
- ``kmon.local.cluster``: ``LocalCluster``, the cluster and its fault verbs.
- ``kmon.local.prometheus``: ``LocalPrometheus``, kmon's own Prometheus instance.
- ``kmon.local.ports``: the port layout derived from ``KMON_PORT_BASE``.

Used by ``kmon run``, ``kmon cluster``, the test fixtures, probes and the nemesis.
"""
