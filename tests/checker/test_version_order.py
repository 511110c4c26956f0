"""inconsistent-offsets and duplicate."""

from tests.checker.helpers import check, history, poll, send


def test_clean_log_has_neither():
    h = history(
        (0, "ok", "send", [send(1, 10, 0)]),
        (0, "ok", "send", [send(1, 11, 2)]),  # offset 1: a transaction marker
        (1, "ok", "poll", [poll({1: [(0, 10), (2, 11)]})]),
        (2, "ok", "poll", [poll({1: [(0, 10)]})]),
    )
    r = check(h)
    assert r.valid and r.errors == {}


def test_two_values_at_one_offset():
    h = history(
        (0, "ok", "send", [send(1, 10, 0)]),
        (1, "ok", "poll", [poll({1: [(0, 99)]})]),
    )
    assert check(h).errors["inconsistent-offsets"] == [{"key": 1, "offset": 0, "values": [10, 99]}]


def test_polls_disagreeing_with_each_other():
    h = history(
        (1, "ok", "poll", [poll({"k": [(5, "a")]})]),
        (2, "ok", "poll", [poll({"k": [(5, "b")]})]),
        (3, "ok", "poll", [poll({"k": [(5, "c")]})]),
        (3, "ok", "poll", [poll({"k": [(5, "c")]})]),  # seen again: same anomaly
    )
    errs = check(h).errors["inconsistent-offsets"]
    assert len(errs) == 1 and sorted(errs[0]["values"]) == ["a", "b", "c"]


def test_failed_send_at_a_visible_offset_is_not_in_the_version_order():
    # Jepsen infers version orders only from sends whose effects are provably visible.
    h = history(
        (0, "fail", "send", [send(1, 7, 3)]),
        (1, "ok", "poll", [poll({1: [(3, 8)]})]),
    )
    assert "inconsistent-offsets" not in check(h).errors


def test_value_at_two_offsets():
    h = history(
        (0, "ok", "send", [send(1, 10, 4)]),
        (1, "ok", "poll", [poll({1: [(4, 10), (5, 10)]})]),
    )
    dup = check(h).errors["duplicate"]
    assert dup == [{"key": 1, "value": 10, "offsets": [4, 5], "count": 2}]


def test_bufstream_spurious_zero_offsets():
    # Bufstream 0.1.0 #3: sends that timed out came back "ok" at offset 0, though pollers saw
    # the values at their real, higher offsets. Jepsen saw both anomalies at once.
    h = history(
        (0, "ok", "send", [send(9, 1, 0)]),
        (1, "ok", "poll", [poll({9: [(0, 1)]})]),
        (2, "ok", "send", [send(9, 67, 0)]),
        (3, "ok", "send", [send(9, 224, 0)]),
        (1, "ok", "poll", [poll({9: [(66, 67), (223, 224)]})]),
        (4, "ok", "send", [send(6, 26, 0)]),
        (5, "ok", "poll", [poll({6: [(25, 26)]})]),
    )
    r = check(h)
    inc = {e["key"]: sorted(e["values"]) for e in r.errors["inconsistent-offsets"]}
    assert inc == {9: [1, 67, 224]}
    dups = {(e["key"], e["value"]): e["offsets"] for e in r.errors["duplicate"]}
    assert dups == {(9, 67): [0, 66], (9, 224): [0, 223], (6, 26): [0, 25]}
    assert not r.valid


def test_duplicate_seen_by_send_then_poll_in_either_order():
    a = history((0, "ok", "send", [send(1, 5, 1)]), (1, "ok", "poll", [poll({1: [(3, 5)]})]))
    b = history((1, "ok", "poll", [poll({1: [(3, 5)]})]), (0, "ok", "send", [send(1, 5, 1)]))
    for h in (a, b):
        assert check(h).errors["duplicate"] == [
            {"key": 1, "value": 5, "offsets": [1, 3], "count": 2}]


def test_spurious_offset_acked_after_the_value_was_polled():
    # The ack claims an offset another value holds, and a poll saw the value at its real
    # offset first: the same verdicts as with the ack first, and the value is not unseen.
    acks = [(0, "ok", "send", [send(1, 10, 0)]), (0, "ok", "send", [send(1, 11, 0)])]
    read = (1, "ok", "poll", [poll({1: [(0, 10), (1, 11)]})])
    for h in (history(*acks, read), history(acks[0], read, acks[1])):
        r = check(h)
        assert r.errors["inconsistent-offsets"] == [{"key": 1, "offset": 0, "values": [10, 11]}]
        assert r.errors["duplicate"] == [{"key": 1, "value": 11, "offsets": [0, 1], "count": 2}]
        assert not r.unseen_counts, r.unseen_counts


def test_spurious_offset_value_read_uncommitted_then_committed_is_not_unseen():
    # The first poll to see the value at its real offset belongs to a failed transaction, a
    # committed one reads it next: consumed, though the ack put it at a conflicting offset.
    h = history(
        (0, "ok", "send", [send(1, 10, 0)]),
        (1, "ok", "poll", [poll({1: [(0, 10)]})]),
        (0, "ok", "send", [send(1, 11, 0)]),
        (2, "fail", "txn", [poll({1: [(1, 11)]})]),
        (3, "ok", "poll", [poll({1: [(1, 11)]})]),
    )
    r = check(h)
    assert r.errors["duplicate"] == [{"key": 1, "value": 11, "offsets": [0, 1], "count": 2}]
    assert not r.unseen_counts, r.unseen_counts


def test_spurious_offset_on_a_free_slot_read_where_it_really_is_is_not_lost():
    # The ack names an offset nobody holds (0), a failed transaction then a committed poll read
    # the value at its real offset (2), and reads go past 0: a duplicate, neither a lost
    # write nor unseen (seen in the detection matrix's injected spurious-zero row).
    h = history(
        (0, "ok", "send", [send(1, 12, 0)]),
        (0, "ok", "send", [send(1, 13, 3)]),
        (2, "fail", "txn", [poll({1: [(2, 12)]})]),
        (3, "ok", "poll", [poll({1: [(2, 12), (3, 13)]})]),
    )
    for r in (check(h), check(h, grace_ns=1, unseen_grace_ns=1)):
        assert r.errors["duplicate"] == [{"key": 1, "value": 12, "offsets": [0, 2], "count": 2}]
        assert not r.errors.get("lost-write"), r.errors.get("lost-write")
        assert not r.unseen_counts, r.unseen_counts


def test_value_read_committed_at_a_conflicting_offset_is_not_unseen():
    # 2 and 4 both acked at 0; a committed poll read 4 there, an aborted one at 1.
    h = history(
        (0, "ok", "send", [send("y", 2, 0)]),
        (0, "ok", "send", [send("y", 4, 0)]),
        (1, "ok", "poll", [poll({"y": [(0, 4)]})]),
        (2, "fail", "poll", [poll({"y": [(1, 4)]})]),
    )
    r = check(h)
    assert {"inconsistent-offsets", "duplicate"} <= set(r.errors)
    assert r.unseen_messages == {"y": [2]}
