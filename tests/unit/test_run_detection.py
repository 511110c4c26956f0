"""tests/run_detection.py: a death by signal gets one rerun; a failed test does not."""

from __future__ import annotations

import pytest

from tests import run_detection


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(run_detection, "_fresh_stack", lambda: calls.append("fresh"))
    return calls


def _codes(monkeypatch: pytest.MonkeyPatch, calls: list[str], codes: list[int]) -> None:
    def run(args: list[str]) -> int:
        calls.append("run")
        return codes.pop(0)
    monkeypatch.setattr(run_detection, "_run", run)


@pytest.mark.parametrize("death", [-11, 139, -6])
def test_a_death_by_signal_is_rerun_once_on_a_fresh_stack(
    monkeypatch: pytest.MonkeyPatch, runs: list[str], death: int
) -> None:
    _codes(monkeypatch, runs, [death, 0])
    assert run_detection.main([]) == 0
    assert runs == ["run", "fresh", "run"]


@pytest.mark.parametrize("code", [0, 1, 2])
def test_a_verdict_stands(monkeypatch: pytest.MonkeyPatch, runs: list[str], code: int) -> None:
    _codes(monkeypatch, runs, [code])
    assert run_detection.main([]) == code
    assert runs == ["run"]


def test_a_second_death_fails(monkeypatch: pytest.MonkeyPatch, runs: list[str]) -> None:
    _codes(monkeypatch, runs, [-11, -11])
    assert run_detection.main([]) == -11
    assert runs == ["run", "fresh", "run"]
