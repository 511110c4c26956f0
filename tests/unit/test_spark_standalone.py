"""The standalone cluster harness's bookkeeping, without starting Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmon.local.ports import SPARK_WORKER_IDS
from kmon.local.spark_standalone import SparkStandalone


def _leftovers(sa: SparkStandalone, n: int) -> list[Path]:
    """An earlier run's executor directory (with its unpacked archive) and shuffle file."""
    files = [sa.work_dir(n) / "app-20261126182746-0000" / "0" / "kmon.tar.gz" / "bin" / "python",
             sa.root / f"worker-{n}" / "local" / "blockmgr-1" / "shuffle_0_0_0.data"]
    for f in files:
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x" * 1024)
    return files


def test_up_removes_what_earlier_runs_left_in_stopped_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = SparkStandalone(home=tmp_path, port_base=30000)
    running = {2}  # worker 2 still runs (its application may be alive): left alone
    files = {n: _leftovers(sa, n) for n in SPARK_WORKER_IDS}
    started: list = []
    monkeypatch.setattr(sa, "pid", lambda worker=None: 1 if worker in running else None)
    monkeypatch.setattr(sa, "_start", lambda worker, args: started.append(worker))
    monkeypatch.setattr(sa, "_wait", lambda *a: None)
    monkeypatch.setattr(sa, "wait_workers", lambda *a: None)
    sa.up()
    assert started == [None, 1]  # the master, then the stopped worker
    assert not any(f.exists() for f in files[1])
    assert sa.work_dir(1).is_dir()  # made again for the worker
    assert all(f.exists() for f in files[2])


def test_a_running_master_keeps_every_workers_directories(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker restarted under a live master (a lost node coming back) may serve a live
    # application: nothing of it is removed.
    sa = SparkStandalone(home=tmp_path, port_base=30000)
    files = _leftovers(sa, 1)
    monkeypatch.setattr(sa, "pid", lambda worker=None: 1 if worker is None else None)
    monkeypatch.setattr(sa, "_start", lambda worker, args: None)
    monkeypatch.setattr(sa, "_wait", lambda *a: None)
    monkeypatch.setattr(sa, "wait_workers", lambda *a: None)
    sa.up()
    assert all(f.exists() for f in files)
