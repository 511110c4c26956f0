"""Outcome classification: what the client saw, as exactly ``ok``, ``fail`` or ``info``.

The rules (pure functions, so they are unit-tested without a cluster):

- ``ok`` only when the client confirmed: a send's delivery report without error (its offset
  goes in the op), a transaction whose ``commit_transaction`` returned.
- ``fail`` only when the op definitely took no effect:

  * a send ``produce()`` refused synchronously (nothing was queued), or whose delivery report
    carries an error that proves the record never reached a log (purged from the queue before
    it was sent, or a non-retriable rejection of the record itself);
  * a transaction that never attempted to commit and whose abort completed: either
    ``abort_transaction`` returned (deliberate aborts after every delivery report was in), or,
    after any error in its body, a replacement producer with the same ``transactional.id``
    finished ``init_transactions``, which aborts the open transaction and bumps the producer
    epoch so no straggling request of the old one can land afterwards (KAFKA-17754: a retried
    EndTxn of an earlier transaction must not commit or abort a later one).

- ``info`` for everything else: timeouts, delivery errors that may have been written, a commit
  that raised (never aborted afterwards: that abort could race the commit), an abort that
  raised. After an ``info`` the process gets a fresh id and new clients.

Offset commits (``commit`` ops, a synchronous ``Consumer.commit``) follow the same rules: ``ok``
when every partition came back without error; ``fail`` only for errors with which the group
coordinator refuses a commit before writing anything to ``__consumer_offsets`` (or that
librdkafka raises before sending one); ``info`` for the rest: timeouts, transport errors and
coordinator moves, after which the commit may or may not have been stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError

OK, FAIL, INFO = "ok", "fail", "info"

# Delivery report errors proving the record never reached a partition log.
_NEVER_WRITTEN = frozenset((
    KafkaError._PURGE_QUEUE,  # purged from the local queue before it was ever sent
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._INVALID_ARG,
))
# Broker rejections of the record or batch itself: deterministic, so no earlier attempt of the
# same batch can have succeeded (only when not retriable).
_REJECTED = frozenset((
    KafkaError.MSG_SIZE_TOO_LARGE,  # also what librdkafka reports for a record over its limit
    KafkaError.INVALID_MSG,  # CORRUPT_MESSAGE
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_REQUIRED_ACKS,
))


def error_name(err: KafkaError | BaseException | str | None) -> str:
    """The librdkafka error name (``_MSG_TIMED_OUT``, ``NOT_LEADER_FOR_PARTITION``, ...), for
    the ``code`` label; ``python:<Type>`` for errors that are not Kafka's."""
    if err is None:
        return ""
    if isinstance(err, str):
        return "probe:timeout"  # the probe's own verdict: no answer within the op timeout
    if isinstance(err, KafkaError):
        return err.name()
    kerr = kafka_error(err)
    if kerr is not None:
        return kerr.name()
    return f"python:{type(err).__name__}"


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError a KafkaException (or KafkaError raised directly) carries, if any."""
    if isinstance(exc, KafkaError):
        return exc
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], KafkaError):
        return args[0]
    return None


def error_text(err: KafkaError | BaseException | str | None) -> str | None:
    if err is None or isinstance(err, str):
        return err
    kerr = err if isinstance(err, KafkaError) else kafka_error(err)
    if kerr is not None:
        return f"{kerr.name()}: {kerr.str()}"
    return f"{type(err).__name__}: {err}"


def send_outcome(delivered: bool, err: KafkaError | None) -> str:
    """Outcome of a non-transactional send that ``produce()`` accepted.

    ``delivered``: a delivery report arrived before the op's timeout; ``err`` is its error.
    """
    if not delivered:
        return INFO  # still queued or in flight: it may be written later
    if err is None:
        return OK
    return FAIL if never_written(err) else INFO


def never_written(err: KafkaError) -> bool:
    """Does this delivery error prove the record reached no log?"""
    code = err.code()
    if code in _NEVER_WRITTEN:
        return True
    return code in _REJECTED and not err.retriable()


def produce_refused_outcome() -> str:
    """``produce()`` raised (queue full, unknown partition, ...): nothing was queued."""
    return FAIL


def txn_outcome(*, committed: bool | None, aborted: bool | None) -> str:
    """Outcome of a transaction.

    ``committed``: None when commit was never attempted, True when ``commit_transaction``
    returned, False when it raised. ``aborted``: None when no abort was attempted, True when
    the abort completed (``abort_transaction`` returned, or a replacement producer's
    ``init_transactions`` did), False when it failed.
    """
    if committed is not None:
        return OK if committed else INFO
    if aborted:
        return FAIL
    return INFO


# Raised by librdkafka before any request is sent: the only commit errors that prove nothing was
# stored. A refusal by the coordinator does not: librdkafka retries an OffsetCommit after a
# request timeout, a transport error or a coordinator error (up to twice), and if such a first
# attempt was in fact stored and a retry was then refused (the group rebalanced meanwhile, the
# member was fenced...), the refusal is all the application sees. Nothing in confluent-kafka's
# API tells a retried commit apart, so a refused commit is ``info``: the checker then allows for
# its offsets (kmon.checker.offsets), where ``fail`` would have it report them, falsely, as an
# offset nobody committed.
_COMMIT_NOT_SENT = frozenset((
    KafkaError._NO_OFFSET,  # no valid offset to commit
    KafkaError._INVALID_ARG,
))


def commit_outcome(errors: Sequence[KafkaError | None]) -> str:
    """Outcome of a synchronous offset commit that returned: ``errors`` holds each committed
    partition's error (None: stored). Any error is ``info`` (see ``_COMMIT_NOT_SENT``); some
    stored and some refused is too (the op model has no partial outcome)."""
    return OK if all(e is None for e in errors) else INFO


def commit_error_outcome(err: KafkaError) -> str:
    """Outcome of a synchronous offset commit that raised ``err``: ``fail`` only when
    librdkafka sent nothing."""
    return FAIL if err.code() in _COMMIT_NOT_SENT else INFO
