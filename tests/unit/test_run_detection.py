"""tests/run_detection.py: a death by signal gets one rerun; a failed test does not; a module
whose every test skipped fails the run (tests/skip_policy.py)."""

from __future__ import annotations

import subprocess
import sys

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


SKIPPING = '''
import pytest

def test_a():
    pytest.skip("a tool is missing")

@pytest.mark.parametrize("n", [1, 2])
def test_b(n):
    pytest.skip("a tool is missing")
'''
PARTLY = SKIPPING + '''
def test_c():
    pass
'''


def _pytest(tmp_path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "test_probe_module.py"
    module.write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.skip_policy", "-q",
                           "-p", "no:cacheprovider", *args, str(module)],
                          cwd=run_detection.ROOT, capture_output=True, text=True, timeout=120)


def test_a_module_whose_every_test_skipped_fails_the_run(tmp_path) -> None:
    done = _pytest(tmp_path, SKIPPING)
    assert done.returncode == 1, done.stdout
    assert "every test of the module skipped" in done.stdout
    assert _pytest(tmp_path, PARTLY).returncode == 0


def test_run_detection_fails_when_the_matrix_module_skipped_whole(
    tmp_path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = tmp_path / "test_detection.py"
    module.write_text(SKIPPING)
    monkeypatch.setattr(run_detection, "MODULE", str(module))
    assert run_detection.main(["-p", "no:cacheprovider"]) == 1
