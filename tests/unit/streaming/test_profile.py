"""The worker profile (``KMON_MONITOR_PROFILE=1``) reports across tasks of one worker."""

from __future__ import annotations

import ast

import pytest

from kmon.streaming.processors import _Profile


@pytest.fixture
def profiling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Profile, "enabled", True)
    monkeypatch.setattr(_Profile, "every", 10)
    monkeypatch.setattr(_Profile, "totals", {})


def _task(fragments_per_key: list[int]) -> None:
    """One task as Spark runs it: a fresh (unpickled) processor's profile, then its keys."""
    prof = _Profile()
    prof.start()
    for n in fragments_per_key:
        prof.lap("spark")
        prof.lap("fold")
        prof.count(n)


def _reports(err: str) -> list[dict]:
    return [ast.literal_eval(line.split(" ", 1)[1]) for line in err.splitlines()
            if line.startswith("kmon-monitor-profile ")]


def test_small_tasks_add_up_to_a_report(profiling: None, capsys: pytest.CaptureFixture) -> None:
    _task([3, 3])
    assert _reports(capsys.readouterr().err) == []  # 6 fragments: not yet
    _task([2, 2])
    (report,) = _reports(capsys.readouterr().err)
    assert (report["tasks"], report["keys"], report["fragments"]) == (2, 4, 10)
    assert report["spark"] >= 0 and report["fold"] >= 0
    assert _Profile.totals == {}  # reported totals start again


def test_laps_start_at_the_task_not_at_the_processors_creation(
        profiling: None, capsys: pytest.CaptureFixture) -> None:
    prof = _Profile()  # made on the driver, long before any task
    prof.t = -1e9  # a clock value from another process: must not be counted
    prof.start()
    prof.lap("spark")
    prof.count(10)
    (report,) = _reports(capsys.readouterr().err)
    assert report["spark"] < 60


def test_off_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Profile, "enabled", False)
    monkeypatch.setattr(_Profile, "totals", {})
    prof = _Profile()
    prof.start()
    prof.lap("spark")
    prof.count(10**6)
    assert _Profile.totals == {}
