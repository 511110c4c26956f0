"""A probe child that goes silent is killed with its stacks in a file beside its history, and
its error names where each thread was, even when it is frozen with the GIL held in a native
call (as a confluent-kafka call that waits on librdkafka's main thread without releasing the
GIL would leave it): faulthandler answers the parent's signal from a signal handler, without
the interpreter."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path
from typing import Any

import pytest

from kmon.nemesis import probe_child
from kmon.nemesis.probe_child import ProbeChild, ProbeDied, stacks_path
from kmon.probes.stacks import enable_stack_dumps


def frozen_child(overrides: dict[str, str], history: str, conn: Any, dump_after: float) -> None:
    """The probe child's set-up, then a native sleep that keeps the GIL (PyDLL does not
    release it): no Python runs in the process again, so it never answers."""
    enable_stack_dumps(open(stacks_path(Path(history)), "w", buffering=1))  # noqa: SIM115
    conn.send(("started", "frozen"))
    for _ in range(4):  # the parent's dump signal cuts one sleep short, not the freeze
        ctypes.PyDLL(None).sleep(30)


def test_a_child_frozen_with_the_gil_held_is_killed_with_its_stacks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(probe_child, "_child_main", frozen_child)  # pickled by name: spawn
    history = tmp_path / "history.jsonl"
    child = ProbeChild({}, history)
    child.start()
    with pytest.raises(ProbeDied, match="sent nothing within 2s of shutdown") as died:
        child.shutdown(timeout=2.0)
    # Its main thread, in the frozen function: the dump came while the GIL was held; the
    # error itself says where (a test run's captured stderr would have lost it).
    assert "innermost frames: frozen_child (test_probe_child_hang.py:" in str(died.value)
    assert str(stacks_path(history)) in str(died.value)
    assert "most recent call first" in stacks_path(history).read_text()
    assert child._proc.exitcode is not None  # killed, not left behind


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")
def test_a_silent_childs_native_stacks_show_the_thread_holding_the_gil(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Python's stacks show where each thread called into native code, not which one holds
    the GIL; gdb's do (CI, 2026-12-07: a 5 s ``join`` that had not returned after minutes)."""
    monkeypatch.setattr(probe_child, "_child_main", frozen_child)
    history = tmp_path / "history.jsonl"
    child = ProbeChild({}, history)
    child.start()
    with pytest.raises(ProbeDied):
        child.shutdown(timeout=2.0)
    native = stacks_path(history).read_text().split("--- native stacks of pid", 1)
    assert len(native) == 2, "no native stacks appended"
    assert "nanosleep" in native[1], native[1][-3000:]  # the frozen thread, asleep in libc
