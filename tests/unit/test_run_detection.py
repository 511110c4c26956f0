"""tests/run_detection.py: a death by signal fails the run (no rerun) and leaves a core whose
stacks are printed; a failed test is a verdict; a module whose every test skipped fails the
run (tests/skip_policy.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import run_detection


def _codes(monkeypatch: pytest.MonkeyPatch, calls: list[str], codes: list[int]) -> None:
    def run(args: list[str]) -> int:
        calls.append("run")
        return codes.pop(0)
    monkeypatch.setattr(run_detection, "_run", run)


@pytest.mark.parametrize("death", [-11, 139, -6])
def test_a_death_by_signal_fails_the_run_without_a_rerun(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], death: int) -> None:
    calls: list[str] = []
    _codes(monkeypatch, calls, [death, 0])
    monkeypatch.setattr(run_detection, "newest_core", lambda *_: None)
    assert run_detection.main([]) == death
    assert calls == ["run"]
    assert "a crash, not a verdict" in capsys.readouterr().out


@pytest.mark.parametrize("code", [0, 1, 2])
def test_a_verdict_stands(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    calls: list[str] = []
    _codes(monkeypatch, calls, [code])
    assert run_detection.main([]) == code
    assert calls == ["run"]


CRASH = "import ctypes; ctypes.string_at(0)"  # a read of address 0: SIGSEGV


def test_a_crash_leaves_a_core_and_the_crashing_threads_stack(tmp_path: Path) -> None:
    """The child inherits the core limit; gdb reads the core back (what a crashed matrix
    run prints). Where cores go to a handler (core_pattern ``|...``) none lands here."""
    started = time.time() - 1
    done = subprocess.run([sys.executable, "-c", CRASH], cwd=tmp_path,
                          preexec_fn=run_detection.allow_cores, capture_output=True)
    assert done.returncode == -signal.SIGSEGV
    core = run_detection.newest_core(tmp_path, started)
    if Path("/proc/sys/kernel/core_pattern").read_text().startswith("|"):
        assert core is None
        return
    assert core is not None
    out = subprocess.run([sys.executable, "-c", "from pathlib import Path; from tests import "
                          f"run_detection as r; r.print_core_stacks(Path({str(core)!r}))"],
                         cwd=run_detection.ROOT, capture_output=True, text=True, timeout=600)
    assert "SIGSEGV" in out.stdout or "gdb not installed" in out.stdout, out.stdout[-2000:]


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
