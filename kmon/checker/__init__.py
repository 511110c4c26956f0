"""kmon's checker core: every Kafka queue anomaly, defined once, as an incremental fold.

Pure Python: imports nothing but ``kmon.history`` and the standard library, so the same
definitions serve ``kmon check`` offline, the Spark monitor online, and the tests. Installing
kmon compiles these modules with mypyc (``setup.py``, ``kmon/_build.py``): the same source,
about twice as fast; ``KMON_COMPILE=0`` installs them uncompiled.

Data model (after Jepsen's ``jepsen.tests.kafka``)
--------------------------------------------------
- A *key* is one topic-partition: a totally ordered log of records at increasing, possibly
  sparse, offsets (transaction markers and aborted records take offsets but are invisible).
- Values are unique per key; keys and values are opaque ints or strings.
- Ops (``kmon.history.model.Op``) are ``send``/``poll``/``txn`` (micro-ops), ``assign``/
  ``subscribe`` (keys) and ``crash``, each an invoke followed by ok / fail / info.
- An op is split into per-key *fragments* (``kmon.history.fragment.split``); each key folds
  its fragments into a ``KeyState`` (``fold.apply``); multi-write ops' per-key facts fold per
  writer in the ``TxnStage``; cycles are searched over the whole dependency graph offline.

Analyses, in the order the fold applies them
--------------------------------------------
1. Version order (``version_order``): ok sends with offsets and every completed poll place values
   at offsets -> ``inconsistent-offsets``, ``duplicate``.
2. Writer outcomes (``aborted_read``): ``G1a`` (a failed op's value read by anyone),
   ``precommitted-read`` (a transaction reads its own write).
3. Absence (``lost_write``): ``lost-write`` (an acknowledged value below what readers went past,
   never read; info writers count once another of their writes was read), decided after a
   grace period online.
4. Order (``poll_skip``, ``send_order``): ``poll-skip``, ``nonmonotonic-poll``,
   ``nonmonotonic-send`` between a process's ops; ``int-poll-skip``, ``int-nonmonotonic-poll``,
   ``int-send-skip``, ``int-nonmonotonic-send`` within one op; rebalances and assigns exempt.
5. Atomicity (``torn``): ``torn-transaction``, a multi-write op partly visible and partly
   provably invisible (KAFKA-17754; not detected by Jepsen).
6. Cycles (``cycles``): ``G0`` and ``G1c`` over ww (``--ww-deps``) and wr dependencies.
7. Observability (``unseen``, ``realtime_lag``): acknowledged values never polled, and how far
   behind the end of each log every consumer was at each poll.

Judging is separate (``policy.allowed_anomalies``): G0 and int-send-skip are normal in Kafka.
A history with no send, poll or txn op is invalid, not vacuously valid.
"""

from kmon.checker.anomaly import ANOMALY_TYPES, Anomaly
from kmon.checker.checker import CheckConfig, Checker
from kmon.checker.fold import FoldConfig
from kmon.checker.policy import allowed_anomalies
from kmon.checker.report import Report
from kmon.checker.sink import Sink, TxnFact
from kmon.checker.state import KeyState
from kmon.checker.torn import TxnStage
from kmon.history.fragment import Fragment, split

__all__ = [
    "ANOMALY_TYPES",
    "Anomaly",
    "CheckConfig",
    "Checker",
    "FoldConfig",
    "Fragment",
    "KeyState",
    "Report",
    "Sink",
    "TxnFact",
    "TxnStage",
    "allowed_anomalies",
    "check",
    "split",
]


def check(ops, config: CheckConfig | None = None) -> Report:
    """Check a whole history (an iterable of ``Op``) and return the report."""
    return Checker(config).run(ops)
