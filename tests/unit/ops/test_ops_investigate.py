"""kmon investigate from history files: evidence, around-key-offset, the story, exit codes."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from kmon.cli import main
from kmon.history import dump_jsonl
from kmon.history.model import Op, OpMeta
from kmon.investigate import Evidence, EvidenceError, investigate, parse_evidence
from kmon.investigate.page import render as page
from kmon.investigate.story import around, key_history
from kmon.investigate.text import render as text
from kmon.synth import SynthConfig, healthy

# ---------------------------------------------------------------------------------------------
# Histories


def op(index: int, process: Any, type: str, f: str, value: Any = None, time: int | None = None,
       probe: str = "") -> Op:
    meta = OpMeta(probe=probe) if probe else None
    return Op(index, index * 10 if time is None else time, process, type, f, value, (), meta)


LOST_KEY, LOST_VALUE, LOST_OFFSET, WRITER, READER = 0, 8589934619, 59, 403, 411


def lost_write_history() -> list[Op]:
    """A healthy synthetic run (4 keys, 4 processes) where no poll ever returns one acked value:
    the checker finds a lost write (value at offset 59 of key 0, written by op 403, read past
    by op 411) and the poll-skips over it."""
    ops = list(healthy(3000, SynthConfig(keys=4, processes=4, keys_per_process=2, seed=7)))
    out = []
    for o in ops:
        if o.type == "ok" and o.f in ("poll", "txn") and o.value:
            value = [("poll", {k: [(off, v) for off, v in pairs
                                   if not (k == LOST_KEY and v == LOST_VALUE)]
                               for k, pairs in m[1].items()}) if m[0] == "poll" and m[1] else m
                     for m in o.value]
            o = dataclasses.replace(o, value=value)
        out.append(o)
    return out


@pytest.fixture(scope="module")
def lost_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inv") / "lost.jsonl"
    with path.open("w") as f:
        dump_jsonl(lost_write_history(), f)
    return path


def write_evidence(tmp_path: Path, **record: Any) -> Path:
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps({"id": "an-1", "topic": "probe-a", "partition": 0, **record}))
    return path


def g1a_history() -> list[Op]:
    """A transaction aborted on purpose, whose write a read_committed poll still returned."""
    return [
        op(0, 0, "invoke", "assign", [7]), op(1, 0, "ok", "assign", [7]),
        op(2, 1, "invoke", "txn", [("send", 7, "a", None)]),
        op(3, 1, "ok", "txn", [("send", 7, "a", 0)]),
        op(4, 1, "invoke", "txn", [("send", 7, "b", None)]),
        op(5, 1, "fail", "txn", [("send", 7, "b", 2)]),
        op(6, 0, "invoke", "poll", [("poll", None)]),
        op(7, 0, "ok", "poll", [("poll", {7: [(0, "a"), (2, "b")]})]),
    ]


def pairs(ops: list[Op]) -> list[tuple[str, Op]]:
    return [("", o) for o in ops]


# ---------------------------------------------------------------------------------------------
# Evidence records


def test_parse_minimal_and_rich_evidence() -> None:
    ev = parse_evidence({"id": 17, "anomaly": "lost-write", "key": 3, "topic": "t",
                         "partition": "2", "offset": 9, "value": "x"})
    assert (ev.id, ev.anomaly, ev.key, ev.topic, ev.partition) == ("17", "lost-write", 3, "t", 2)
    assert ev.offsets == [9] and ev.values == ["x"] and ev.ops == []
    ev = parse_evidence({"id": "p", "anomaly": "poll-skip", "key": "k", "offsets": [4, 7],
                         "values": [1, 2], "ops": [5, {"index": 9, "process": 2, "time": 90}]})
    assert ev.offsets == [4, 7] and ev.values == [1, 2]
    assert ev.op_indices == {5, 9} and ev.ops[1].process == 2


def test_parse_checker_record_passed_through() -> None:
    ev = parse_evidence({"id": "t1", "anomaly": "torn-transaction", "key": 5, "topic": "t",
                         "partition": 5, "record": {
                             "writer": 12, "visible": [[5, 424, 653]],
                             "invisible": [[17, 926, 1360], [5, 425, 654]]}})
    assert ev.op_indices == {12}
    assert ev.values == [424, 425] and ev.offsets == [653, 654]  # key 5's writes only


@pytest.mark.parametrize("record", [{"id": 1, "anomaly": "duplicate"}, [1, 2], "x"])
def test_unusable_evidence_is_an_error(record: Any) -> None:
    with pytest.raises(EvidenceError):
        parse_evidence(record)


# ---------------------------------------------------------------------------------------------
# around-key-offset


def test_key_history_trims_to_the_key_and_keeps_invokes_and_crashes() -> None:
    ops = [
        op(0, 1, "invoke", "txn", [("send", 1, "a", None), ("send", 2, "b", None)]),
        op(1, 1, "ok", "txn", [("send", 1, "a", 0), ("send", 2, "b", 0)]),
        op(2, 2, "invoke", "poll", [("poll", None)]),
        op(3, 2, "ok", "poll", [("poll", {2: [(0, "b")]})]),  # other key only: dropped
        op(4, 1, "info", "crash"),
        op(5, 3, "invoke", "poll", [("poll", None)]),
        op(6, 3, "ok", "poll", [("poll", {1: [(0, "a")], 2: [(0, "b")]})]),
    ]
    out = key_history(ops, 1)
    assert [o.index for o in out] == [0, 1, 4, 5, 6]
    assert out[1].value == [("send", 1, "a", 0)]
    assert out[4].value == [("poll", {1: [(0, "a")]})]


def test_offset_commits_stay_in_the_story_of_their_key() -> None:
    # A transaction's offsets (commit mops) and a commit op, next to sends and polls.
    ops = [
        op(0, 1, "ok", "txn", [("poll", {1: [(4, "a")]}), ("send", 2, "b", 0),
                               ("commit", 1, 5), ("commit", 2, 1)]),
        op(1, 1, "ok", "commit", [("commit", 1, 5)]),
    ]
    out = key_history(ops, 1)
    assert [o.index for o in out] == [0, 1]
    assert out[0].value == [("poll", {1: [(4, "a")]}), ("commit", 1, 5)]
    from kmon.investigate.text import did
    assert did(out[0], 1) == "read 4 ['a']; committed offset 5 for its group"
    assert did(out[1], 1) == "committed offset 5 for its group"


def test_around_keeps_only_mops_near_the_offset_like_jepsen() -> None:
    ops = [
        op(1, 1, "ok", "send", [("send", "k", "v3", 3), ("send", "k", "v9", 9)]),
        op(3, 2, "ok", "poll", [("poll", {"k": [(2, "v2"), (3, "v3"), (4, "v4"), (8, "v8")]})]),
        op(5, 3, "ok", "poll", [("poll", {"k": [(20, "v20")]})]),
        op(7, 1, "info", "send", [("send", "k", "v?", None)]),  # offset unknown
        op(9, 1, "info", "send", [("send", "k", "w", None)]),
    ]
    near = around(ops, "k", (2, 5), values=["w"], op_indices=[5])
    assert [(o.index, o.value) for o in near] == [
        (1, [("send", "k", "v3", 3)]),
        (3, [("poll", {"k": [(2, "v2"), (3, "v3"), (4, "v4")]})]),
        (5, []),  # named by the evidence: kept, nothing near
        (9, [("send", "k", "w", None)]),  # a value in question, offset unknown
    ]


# ---------------------------------------------------------------------------------------------
# The story


def test_lost_write_story_from_a_history_file(lost_history: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    ev = write_evidence(tmp_path, anomaly="lost-write", key=LOST_KEY, value=LOST_VALUE,
                        offset=LOST_OFFSET)
    html = tmp_path / "story.html"
    code = main(["investigate", "--evidence", str(ev), "--history", str(lost_history),
                 "--window", "2", "--html", str(html)])
    out = capsys.readouterr().out
    assert code == 0
    # the write, marked, and the reader that went past it
    assert re.search(rf"\*\s+{WRITER}\s+2 .* ok\s+send\s+wrote {LOST_VALUE} at {LOST_OFFSET}",
                     out)
    assert re.search(rf"\*\s+{READER}\s+3 .* ok\s+poll\s+read 60 ", out)
    assert re.search(rf"\*\s+{LOST_OFFSET}\s+{LOST_VALUE}\s+op {WRITER} \(p2, ok\)\s+never read",
                     out)
    assert "offsets 57..61 (±2)" in out and " 62 " not in out  # the window holds
    assert "Verdict: lost-write confirmed" in out
    assert f"acknowledged at offset {LOST_OFFSET} by op {WRITER} (process 2, ok send)" in out
    assert "it pages (alert KmonAnomaly-lost-write)" in out
    assert html.is_file() and 'id="timeline"' in html.read_text()


def test_evidence_the_ops_contradict_is_not_confirmed(lost_history: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # offset 57's value was read by three processes: no lost write there
    ev = write_evidence(tmp_path, anomaly="lost-write", key=LOST_KEY, value=8589934617,
                        offset=57)
    assert main(["investigate", "--evidence", str(ev), "--history", str(lost_history)]) == 1
    out = capsys.readouterr().out
    assert "Verdict: lost-write NOT reproduced" in out
    assert "Other anomalies on this key: lost-write x1, poll-skip x3" in out


def test_evidence_with_ops_only_finds_its_offsets(lost_history: Path) -> None:
    """A poll-skip record names the two polls; the story centres on what they read."""
    from kmon.history import load

    ops = load(lost_history)
    first = investigate(pairs(ops), Evidence("poll-skip", LOST_KEY), source="t")
    skip = first.verdict.matched[0]
    ev = parse_evidence({"id": "s", "anomaly": "poll-skip", "key": LOST_KEY, "ops": skip["ops"]})
    inv = investigate(pairs(ops), ev, source="t", n=1)
    assert inv.verdict.confirmed and inv.verdict.matched == [skip]
    assert set(skip["ops"]) <= {o.index for o in inv.ops} and inv.window is not None
    assert "skipping" in text(inv)


def test_g1a_is_forbidden_for_read_committed_and_allowed_for_read_uncommitted() -> None:
    ev = Evidence("G1a", 7, offsets=[2], values=["b"])
    committed = investigate(pairs(g1a_history()), ev, source="t")
    assert committed.verdict.confirmed
    story = text(committed)
    assert "op 7 (process 0, ok poll) read value b at offset 2, written by op 5 (process 1, " \
           "fail txn), which failed or aborted" in story
    assert "it pages (alert KmonAnomaly-G1a)" in story
    uncommitted = investigate(pairs(g1a_history()), ev, source="t", isolation="read_uncommitted")
    assert "Allowed by Kafka's model for read_uncommitted consumers" in text(uncommitted)


def test_json_output(lost_history: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["investigate", "--key", str(LOST_KEY), "--offset", str(LOST_OFFSET),
                 "--window", "0", "--history", str(lost_history), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["window"] == [LOST_OFFSET, LOST_OFFSET]
    assert out["log"] == [{"offset": LOST_OFFSET, "values": [
        {"value": LOST_VALUE, "writers": [WRITER], "readers": []}]}]
    assert out["verdict"]["confirmed"] is True
    assert out["verdict"]["records"][0]["anomaly"] == "lost-write"
    assert [o["index"] for o in out["ops"] if o["f"] == "send"] == [WRITER]


def test_several_probes_are_kept_apart() -> None:
    """Indices and processes are per probe: across probes they are renamed, never merged."""
    a = [op(0, 0, "invoke", "send", [("send", 1, "x", None)], time=0, probe="a"),
         op(1, 0, "ok", "send", [("send", 1, "x", 0)], time=10, probe="a")]
    b = [op(0, 0, "invoke", "poll", [("poll", None)], time=20, probe="b"),
         op(1, 0, "ok", "poll", [("poll", {1: [(0, "x")]})], time=30, probe="b")]
    inv = investigate([("b", o) for o in b] + [("a", o) for o in a],
                      Evidence(None, 1, offsets=[0], record={"probe": "b"}), source="t")
    assert [(o.process, inv.label(o.index)) for o in inv.ops] == [("a/0", "a/1"),
                                                                  ("b/0", "b/1")]
    assert inv.verdict.report.valid


@pytest.mark.parametrize("args", [
    [],
    ["--key", "3"],
    ["an-1", "--key", "3", "--offset", "1"],
    ["an-1"],  # an id needs the anomalies topic: no bootstrap servers given
])
def test_usage_errors(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KMON_BOOTSTRAP", "KMON_EVENTS_BOOTSTRAP"):
        monkeypatch.delenv(var, raising=False)
    assert main(["investigate", *args]) == 2


def test_page_has_a_lane_per_process_and_a_bar_per_op(lost_history: Path) -> None:
    from kmon.history import load

    inv = investigate(pairs(load(lost_history)),
                      Evidence("lost-write", LOST_KEY, offsets=[LOST_OFFSET],
                               values=[LOST_VALUE]), source="t", n=2)
    html = page(inv)
    timeline = html.split('<svg id="timeline"', 1)[1].split("</svg>", 1)[0]
    procs = {str(o.process) for o in inv.ops if o.f in ("send", "poll", "txn")}
    assert set(re.findall(r'class="lane" data-process="([^"]+)"', timeline)) == procs
    bars = re.findall(r'<g class="op ([^"]+)" data-index="(\d+)"', timeline)
    assert {int(i) for _, i in bars} == {o.index for o in inv.ops if o.f in ("send", "poll",
                                                                             "txn")}
    assert {int(i) for c, i in bars if "evidence" in c.split()} == {WRITER, READER}
    log = html.split('<svg id="log"', 1)[1].split("</svg>", 1)[0]
    assert f'class="cell logcell unread" data-offset="{LOST_OFFSET}"' in log
    assert f'class="col evidence" data-offset="{LOST_OFFSET}"' in log


# ---------------------------------------------------------------------------------------------
# Share groups (KIP-932)

SHARE_KEY, GROUP, S = 7, "sg", 1_000_000_000


def share_history(first_ack: str = "ok", outcome: str = "release",
                  leaders: tuple[int, int] = (1, 1)) -> list[Op]:
    """Offset 176 written; process 1's share poll gets it (count 1) and acknowledges it, then
    process 2's gets it again with count 1 and accepts it. Another key's records ride along."""
    from kmon.history.model import KeyPlacement, ack, send, share_read

    def meta(t0: float | None = None, leader: int | None = None, group: str | None = GROUP
             ) -> OpMeta:
        placed = {} if leader is None else {SHARE_KEY: KeyPlacement("t", 0, leader)}
        return OpMeta(probe="p", group=group, placements=placed,
                      invoke_time=None if t0 is None else int(t0 * S))

    def pair(i: int, p: int, f: str, t0: float, t1: float, inv: Any, done: Any, ty: str = "ok",
             leader: int | None = None, group: str | None = GROUP) -> list[Op]:
        return [Op(i, int(t0 * S), p, "invoke", f, inv, (), meta(group=group)),
                Op(i + 1, int(t1 * S), p, ty, f, done, (), meta(t0, leader, group))]

    rec, other = [(176, "v176", 1)], [(3, "w3", 1)]
    return [
        *pair(0, 100, "send", 0, 0.01, [send(SHARE_KEY, "v176")], [send(SHARE_KEY, "v176", 176)],
              group=None),
        *pair(2, 1, "share-poll", 1, 1.1, [share_read(SHARE_KEY), share_read(8)],
              [share_read(SHARE_KEY, rec), share_read(8, other)], leader=leaders[0]),
        *pair(4, 1, "ack", 2, 2.1, [ack(SHARE_KEY, 176, outcome), ack(8, 3, "accept")],
              [ack(SHARE_KEY, 176, outcome), ack(8, 3, "accept")], ty=first_ack),
        *pair(6, 2, "share-poll", 40, 40.1, [share_read(SHARE_KEY)], [share_read(SHARE_KEY, rec)],
              leader=leaders[1]),
        *pair(8, 2, "ack", 41, 41.1, [ack(SHARE_KEY, 176, "accept")],
              [ack(SHARE_KEY, 176, "accept")]),
    ]


SHARE_EVIDENCE = {"id": "sh-1", "anomaly": "share-delivery-count", "key": SHARE_KEY,
                  "group": GROUP, "offset": 176, "value": "v176", "ops": [3, 7],
                  "processes": [1, 2], "counts": [1, 1]}


def test_share_ops_are_in_the_key_history_trimmed_to_the_key() -> None:
    out = key_history(share_history(), SHARE_KEY)
    assert [o.index for o in out] == list(range(10))
    assert out[3].value == [("share-read", SHARE_KEY, [(176, "v176", 1)])]  # key 8's dropped
    assert out[5].value == [("ack", SHARE_KEY, 176, "release")]
    assert key_history(share_history(), 8)[1].value == [("share-read", 8, [(3, "w3", 1)])]


def test_share_delivery_count_story(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "share.jsonl"
    with history.open("w") as f:
        dump_jsonl(share_history(), f)
    ev = write_evidence(tmp_path, **SHARE_EVIDENCE)
    html = tmp_path / "share.html"
    assert main(["investigate", "--evidence", str(ev), "--history", str(history),
                 "--html", str(html)]) == 0
    out = capsys.readouterr().out
    # the ops, each in words: deliveries with their counts and leader, acks with outcomes
    assert re.search(r"\*\s+3\s+1 .* ok\s+share-poll\s+share group sg: delivered 176 \(v176, "
                     r"count 1\); leader 1", out)
    assert re.search(r" 5\s+1 .* ok\s+ack\s+share group sg: acknowledged 176 RELEASE", out)
    assert re.search(r" 9\s+2 .* ok\s+ack\s+share group sg: acknowledged 176 ACCEPT", out)
    assert re.search(r"\*\s+176\s+v176\s+op 1 \(p100, ok\)\s+2 polls by processes 1, 2", out)
    # each delivery of the offset: poll, process, count, leader, and how it was acknowledged
    assert "Deliveries to share consumers of key 7's offsets in question:" in out
    assert re.search(r"\*\s+176\s+v176\s+sg\s+3\s+1\s+\+1\.000000s\s+1\s+1\s+RELEASE by op 5: ok",
                     out)
    assert re.search(r"\*\s+176\s+v176\s+sg\s+7\s+2\s+\+40\.000000s\s+1\s+1\s+ACCEPT by op 9: ok",
                     out)
    assert "Verdict: share-delivery-count confirmed" in out
    assert ("share group sg delivered offset 176 (v176) to op 3 (process 1, ok share-poll) with "
            "count 1, then to op 7 (process 2, ok share-poll) with count 1, no higher") in out
    page_text = html.read_text()
    timeline = page_text.split('<svg id="timeline"', 1)[1].split("</svg>", 1)[0]
    bars = re.findall(r'<g class="op ([^"]+)" data-index="(\d+)"', timeline)
    assert {int(i): c for c, i in bars} == {
        1: "send ok", 3: "share-poll ok evidence", 5: "ack ok", 7: "share-poll ok evidence",
        9: "ack ok"}
    log = page_text.split('<svg id="log"', 1)[1].split("</svg>", 1)[0]
    for p in (1, 2):
        lane = log.split(f'data-process="{p}"', 1)[1].split("</g>", 1)[0]
        assert 'class="cell read" data-offset="176" data-values="v176"' in lane
    assert '<pre id="deliveries">' in page_text


def test_a_share_failover_story_is_not_an_anomaly() -> None:
    """The live case: the first ack was lost with the leader and the new leader (2) delivered
    176 with count 1 again: the checker allows it, and the story shows why."""
    inv = investigate(pairs(share_history("info", "accept", (1, 2))),
                      parse_evidence(SHARE_EVIDENCE), source="t")
    assert not inv.verdict.confirmed
    assert [(d.poll.index, d.count, d.leader, d.outcome, d.ack and d.ack.type)
            for d in inv.deliveries[176]] == [(3, 1, 1, "accept", "info"), (7, 1, 2, "accept",
                                                                           "ok")]
    story = text(inv)
    assert "Verdict: share-delivery-count NOT reproduced" in story
    assert "--share-lock, --share-delivery-limit and --share-skew must be the monitor's" in story
    assert "it alerts with severity warning (alert KmonAnomaly-share-delivery-count)" in story
    assert re.search(r"\s+3\s+1\s+\+1\.000000s\s+1\s+1\s+ACCEPT by op 5: info", story)
    from kmon.investigate.text import to_json
    assert to_json(inv)["deliveries"][0] == {
        "offset": 176, "value": "v176", "group": GROUP, "poll": 3, "process": 1,
        "invoke-time": S, "count": 1, "leader": 1, "ack": 5, "outcome": "accept",
        "ack-type": "info"}


def test_share_settings_reach_the_re_check(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Two deliveries 39 s apart: within one lock of 60 s (share-concurrent-delivery), not of
    Kafka's default 30 s. A bad setting is a usage error."""
    history = tmp_path / "share.jsonl"
    ops = [o for o in share_history() if o.index not in (4, 5)]  # process 1 never acks
    with history.open("w") as f:
        dump_jsonl(ops, f)
    ev = write_evidence(tmp_path, anomaly="share-concurrent-delivery", key=SHARE_KEY,
                        offset=176, ops=[3, 7])
    args = ["investigate", "--evidence", str(ev), "--history", str(history)]
    assert main(args) == 1
    assert main([*args, "--share-lock", "60s"]) == 0
    out = capsys.readouterr().out
    assert "within one 60000 ms lock, neither acknowledging it first" in out
    assert "never (its lock expires)" in out
    assert main([*args, "--share-lock", "soon"]) == 2
