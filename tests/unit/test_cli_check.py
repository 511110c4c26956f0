"""`kmon check`: formats, output contract and exit statuses, through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kmon.cli import main

DATA = Path(__file__).parent / "history" / "data"

LOST = [
    {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "send",
     "value": [["send", 5, 141]]},
    {"index": 1, "time": 10, "process": 0, "type": "ok", "f": "send",
     "value": [["send", 5, [274, 141]]]},
    {"index": 2, "time": 20, "process": 1, "type": "invoke", "f": "poll", "value": [["poll"]]},
    {"index": 3, "time": 30, "process": 1, "type": "ok", "f": "poll",
     "value": [["poll", {"5": [[273, 142], [277, 144]]}]]},
]


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_report_of_an_anomalous_history(tmp_path: Path, capsys) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps(LOST))
    code, out, _ = run(capsys, "--json", str(path))
    report = json.loads(out)  # exactly one JSON object
    assert code == 1 and report["valid"] is False
    (lost,) = report["errors"]["lost-write"]
    assert lost == {"key": 5, "value": 141, "offset": 274, "writer": 1, "reader": 3,
                    "max-read-offset": 277}
    assert report["unseen"] == {"counts": {"5": 1}, "messages": {"5": [141]}}
    assert set(report) >= {"valid", "errors", "unseen", "realtime-lag", "worst-realtime-lag"}


def test_jsonl_without_indices_is_readable(tmp_path: Path, capsys) -> None:
    path = tmp_path / "h.jsonl"
    read_it = [{"process": 1, "type": "invoke", "f": "poll", "value": [["poll"]]},
               {"process": 1, "type": "ok", "f": "poll", "value": [["poll", {"5": [[274, 141]]}]]}]
    path.write_text("\n".join(json.dumps({k: v for k, v in op.items() if k != "index"})
                              for op in LOST[:2] + read_it))
    code, out, _ = run(capsys, "--json", str(path))
    assert code == 0 and json.loads(out)["valid"] is True


def test_jepsen_edn_history(capsys) -> None:
    # The excerpt's last acknowledged write was never polled: unproven, so invalid (as Jepsen).
    code, out, _ = run(capsys, str(DATA / "jepsen_queue_excerpt.edn"))
    assert code == 1 and out.startswith("valid: false")
    assert "unseen (acknowledged, never polled): 1 (4: 1)" in out


def test_bad_input_names_line_and_field(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(LOST[0]) + "\n" + '{"process": 0, "type": "okk", "f": "send"}\n')
    code, out, err = run(capsys, "--json", str(path))
    assert code == 2
    assert json.loads(out) == {"valid": "unknown", "error": json.loads(out)["error"],
                               "line": 2, "field": "type"}
    assert "line 2" in err and '"type"' in err


def test_missing_file_is_bad_input(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, str(tmp_path / "nope.json"))
    assert code == 2 and "no such file" in err


def test_history_without_workload_is_invalid(tmp_path: Path, capsys) -> None:
    path = tmp_path / "empty.json"
    path.write_text("[]")
    code, out, _ = run(capsys, "--json", str(path))
    assert code == 1 and json.loads(out)["valid"] is False


def test_ww_deps_flag_reaches_the_checker(tmp_path: Path, capsys) -> None:
    ops = []
    for p, sends in ((0, [["send", "x", [0, 1]], ["send", "y", [1, 4]]]),
                     (1, [["send", "x", [1, 2]], ["send", "y", [0, 3]]])):
        ops.append({"process": p, "type": "invoke", "f": "txn",
                    "value": [[m[0], m[1], m[2][1]] for m in sends]})
        ops.append({"process": p, "type": "ok", "f": "txn", "value": sends})
    ops.append({"process": 2, "type": "invoke", "f": "poll", "value": [["poll"]]})
    ops.append({"process": 2, "type": "ok", "f": "poll",
                "value": [["poll", {"x": [[0, 1], [1, 2]], "y": [[0, 3], [1, 4]]}]]})
    path = tmp_path / "g0.json"
    path.write_text(json.dumps(ops))
    _, out, _ = run(capsys, "--json", str(path))
    assert "G0" not in json.loads(out)["errors"]
    code, out, _ = run(capsys, "--json", "--ww-deps", str(path))
    report = json.loads(out)
    assert "G0" in report["errors"] and report["valid"] is True and code == 0


def _share_history(tmp_path: Path) -> Path:
    """Offset 0 delivered at 1 s (count 1) and at 10 s (count 2), no acknowledgement between:
    within one 30 s lock (concurrent), but past a 5 s one."""
    from kmon.history import dump_jsonl
    from tests.checker.test_share import History

    h = History()
    h.write([0], 0)
    h.poll(1, 1, 1.1, [(0, 1)])
    h.poll(2, 10, 10.1, [(0, 2)])
    path = tmp_path / "share.jsonl"
    with path.open("w") as f:
        dump_jsonl(h.ops, f)
    return path


def test_share_settings_reach_the_checker(tmp_path: Path, capsys) -> None:
    path = _share_history(tmp_path)
    code, out, _ = run(capsys, "--json", str(path))
    assert code == 1 and set(json.loads(out)["errors"]) == {"share-concurrent-delivery"}
    code, out, _ = run(capsys, "--json", "--share-lock", "5s", "--share-skew", "500ms",
                       str(path))
    assert code == 0 and json.loads(out)["errors"] == {}
    code, out, _ = run(capsys, "--json", "--share-lock", "5s", "--share-delivery-limit", "1",
                       str(path))
    (rec,) = json.loads(out)["errors"]["share-delivery-count"]
    assert code == 1 and (rec["count"], rec["limit"]) == (2, 1)


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--share-lock", "0", "--share-lock: must be positive"),
    ("--share-lock", "soon", "--share-lock: expected a duration"),
    ("--share-delivery-limit", "0", "--share-delivery-limit: must be in 1..16, got 0"),
    ("--share-delivery-limit", "five", "--share-delivery-limit: expected an integer"),
    ("--share-skew", "-1s", "--share-skew: expected a duration"),
])
def test_bad_share_settings_fail_naming_the_flag(tmp_path: Path, capsys, flag: str, value: str,
                                                 message: str) -> None:
    code, out, err = run(capsys, f"{flag}={value}", str(_share_history(tmp_path)))
    assert code == 2 and out == "" and err.startswith(f"kmon: error: {message}")
