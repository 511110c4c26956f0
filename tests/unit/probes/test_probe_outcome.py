"""Outcome classification: ok only when confirmed, fail only when definite, else info."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmon.probes.outcome import (
    FAIL,
    INFO,
    OK,
    commit_error_outcome,
    commit_outcome,
    error_name,
    error_text,
    never_written,
    send_outcome,
    txn_outcome,
)


def test_a_delivered_send_without_error_is_ok() -> None:
    assert send_outcome(True, None) == OK


def test_a_send_without_delivery_report_is_info() -> None:
    # Still queued or in flight when the op timed out: it may be written later.
    assert send_outcome(False, None) == INFO


@pytest.mark.parametrize("code", [
    KafkaError._MSG_TIMED_OUT,  # librdkafka gave up: the broker may have written it
    KafkaError._PURGE_INFLIGHT,  # purged while a request was out
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,  # written on the leader, not enough ISR
    KafkaError._TRANSPORT,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
])
def test_delivery_errors_that_may_have_written_are_info(code: int) -> None:
    err = KafkaError(code)
    assert not never_written(err)
    assert send_outcome(True, err) == INFO


@pytest.mark.parametrize("code", [
    KafkaError._PURGE_QUEUE,  # never left the client's queue
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_RECORD,
])
def test_delivery_errors_proving_nothing_was_written_are_fail(code: int) -> None:
    assert send_outcome(True, KafkaError(code)) == FAIL


def test_a_retriable_rejection_is_not_definite() -> None:
    # A retried batch may have been written by an earlier attempt.
    err = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "x", retriable=True)
    assert send_outcome(True, err) == INFO


def test_transactions() -> None:
    assert txn_outcome(committed=True, aborted=None) == OK
    # A commit that errored may still land: info, and never an abort afterwards.
    assert txn_outcome(committed=False, aborted=None) == INFO
    assert txn_outcome(committed=None, aborted=True) == FAIL
    assert txn_outcome(committed=None, aborted=False) == INFO
    assert txn_outcome(committed=None, aborted=None) == INFO


def test_error_names_for_the_code_label() -> None:
    assert error_name(KafkaError(KafkaError._MSG_TIMED_OUT)) == "_MSG_TIMED_OUT"
    assert error_name(KafkaException(KafkaError(KafkaError._FENCED))) == "_FENCED"
    assert error_name(BufferError("full")) == "python:BufferError"
    assert error_name(None) == ""
    assert error_name("no delivery report within 10s") == "probe:timeout"


def test_error_text_names_the_error() -> None:
    assert error_text(KafkaError(KafkaError._MSG_TIMED_OUT)).startswith("_MSG_TIMED_OUT: ")
    assert error_text(ValueError("bad")) == "ValueError: bad"
    assert error_text(None) is None
    assert error_text("no delivery report within 10s") == "no delivery report within 10s"


def test_assignment_changes_without_callbacks_are_logged_as_rebalances():
    # Found under a broker SIGKILL: partitions went away and came back with no callback in any
    # op, and the consumer restarted from its committed offset.
    from types import SimpleNamespace

    from kmon.history.model import Rebalance, Start
    from kmon.probes.process import Process

    proc = SimpleNamespace(seen_assignment=None, rebalances=[], starts={}, group="g",
                           starts_group="g")
    proc._started = lambda starts, overwrite=True: Process._started(proc, starts, overwrite)
    Process._note_assignment(proc, {1, 2})  # first poll: nothing to compare with
    assert proc.rebalances == []
    Process._note_assignment(proc, {2})
    assert proc.rebalances == [Rebalance("revoked", (1,))]
    proc.rebalances = [Rebalance("assigned", (1,))]  # a callback did report this one
    proc.starts = {1: Start(5, "committed")}  # ... and where it started
    Process._note_assignment(proc, {1, 2, 3})
    assert proc.rebalances == [Rebalance("assigned", (1,)), Rebalance("assigned", (3,))]
    # 3 restarted where librdkafka put it: no offset the probe knows
    assert proc.starts == {1: Start(5, "committed"), 3: Start(None, "client")}


# ---------------------------------------------------------------------------------------------
# Offset commits


REFUSED = [  # the coordinator refuses the whole request before writing anything (this attempt)
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.STALE_MEMBER_EPOCH,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.INVALID_COMMIT_OFFSET_SIZE,
]
PARTITION_REFUSED = [  # ... or one partition of it, storing the others
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.UNKNOWN_TOPIC_ID,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.OFFSET_METADATA_TOO_LARGE,
]
MAYBE_STORED = [  # the commit may have been stored
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT,  # appended, replication timed out: may still commit
    KafkaError.NOT_COORDINATOR,  # the coordinator moved, maybe mid-append
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError._DESTROY,
    KafkaError._FATAL,
    KafkaError.UNKNOWN,
]


def test_a_commit_whose_every_partition_came_back_clean_is_ok() -> None:
    assert commit_outcome([None, None]) == OK


@pytest.mark.parametrize("code", REFUSED + PARTITION_REFUSED + MAYBE_STORED)
def test_a_refused_commit_may_have_been_stored_by_an_earlier_attempt(code: int) -> None:
    # librdkafka retries a commit after a timeout; a refusal of the retry says nothing about
    # the first attempt, which may have been stored: info, never fail.
    assert commit_outcome([KafkaError(code), KafkaError(code)]) == INFO
    assert commit_outcome([KafkaError(code)]) == INFO
    assert commit_error_outcome(KafkaError(code)) == INFO


def test_a_partly_stored_commit_is_info() -> None:
    refused = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    assert commit_outcome([None, refused]) == INFO


@pytest.mark.parametrize("code", [KafkaError._NO_OFFSET, KafkaError._INVALID_ARG])
def test_a_commit_librdkafka_never_sent_is_fail(code: int) -> None:
    assert commit_error_outcome(KafkaError(code)) == FAIL
