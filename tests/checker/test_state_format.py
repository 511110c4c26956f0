"""A key's state as bytes on its own (``kmon.checker.state_format``): every part survives the
round trip, both clocks, and the previous release's differences convert on load."""

from __future__ import annotations

import pickle
from array import array

import pytest

from kmon.checker import CheckConfig, Checker
from kmon.checker.flags import OCCUPIED, READ_OK, W_OK
from kmon.checker.records import PROC_FIELDS
from kmon.checker.state import KeyState
from kmon.checker.state_format import SCALARS, TABLES, VERSION, flags_v2
from tests.checker.helpers import history, op, poll, send

SECOND = 1_000_000_000
FAR = 1 << 40


def _busy_key(compact: bool) -> KeyState:
    """Key 1 with something in every part: non-int values, a loose value (a send acked without
    an offset), a read waiting for its writer's outcome, a lost-write candidate waiting for its
    grace period, process positions, and a writer too far away for 32 bits."""
    ops = history(
        (0, "ok", "send", [send(1, "a", 0), send(1, "b", 1)]),
        (0, "ok", "send", [send(1, "c", None)]),
        (1, "ok", "poll", [poll({1: [(1, "b")]})]),  # went past "a": a candidate
    )
    ops.append(op(len(ops), 2, "invoke", "send", [send(1, "d", None)]))
    ops.append(op(len(ops), 1, "invoke", "poll", [poll()]))
    ops.append(op(len(ops), 1, "ok", "poll", [poll({1: [(2, "d")]})]))  # writer still open
    far = op(len(ops) + FAR, 3, "ok", "send", [send(1, "e", 5)])
    # Online (a grace period) the state is compact: millisecond times; offline, nanoseconds.
    checker = Checker(CheckConfig(cycles=False, grace_ns=1_000 * SECOND if compact else None))
    for o in [*ops, far]:
        checker.apply(o)
    return checker.keys[1]


def _parts(st: KeyState) -> dict[str, object]:
    return {
        "tables": [bytes(memoryview(t)) for t in st.tables()],
        "writers": [st.writer(i) for i in range(len(st.val))],
        "vals": dict(st.vals),
        "loose": {c: r.row() for c, r in st.loose.items()},
        "pending": {c: [w.row() for w in ws] for c, ws in st.pending_reads.items()},
        "cands": [list(st.cand_due), list(st.cand_offset), list(st.cand_reader)],
        "procs": {p: [getattr(pp, s) for s in PROC_FIELDS] for p, pp in st.procs.items()},
        "scalars": pickle.loads(st.to_bytes())["scalars"],
    }


@pytest.mark.parametrize("compact", [False, True])
def test_every_part_survives_the_round_trip(compact: bool) -> None:
    st = _busy_key(compact)
    assert st.exact_time is not compact
    parts = _parts(st)
    assert all(parts[name] for name in ("vals", "loose", "pending", "procs"))
    assert parts["cands"][0] and max(parts["writers"]) > FAR  # "e"'s writer
    again = KeyState.from_bytes(st.to_bytes())
    assert again.exact_time is not compact
    assert _parts(again) == parts
    assert again.to_bytes() == st.to_bytes()


def test_the_format_names_its_version_tables_and_scalars() -> None:
    body = pickle.loads(_busy_key(False).to_bytes())
    assert body["v"] == VERSION
    assert len(body["arrays"]) == len(TABLES) and len(body["scalars"]) == len(SCALARS)


def test_an_unknown_version_is_refused() -> None:
    body = pickle.loads(KeyState(1).to_bytes())
    body["v"] = VERSION + 1
    with pytest.raises(ValueError, match="unknown key state version"):
        KeyState.from_bytes(pickle.dumps(body))


def test_version_2_flags_move_read_ok_out_of_bit_15() -> None:
    old = array("H", [0, 1 << 15, (1 << 15) | OCCUPIED | W_OK, OCCUPIED])
    assert flags_v2(old.tobytes()) == [0, READ_OK, READ_OK | OCCUPIED | W_OK, OCCUPIED]
