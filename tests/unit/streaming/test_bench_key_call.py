"""bench/bench_key_call.py: what it times are real key calls over paged state."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kmon.streaming import config, monitor

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_key_call.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_key_call", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_store_round_trips_paged_state(bench):
    """Every load is the state the last save stored, cold pages included (a page the head
    lists and the store lacks would raise): the bench times real loads."""
    cfg = config.from_mapping({"kafka.bootstrap.servers": "unused:9092", "checkpoint": "x"})
    s = monitor.fold_settings(cfg)
    ops = bench.workload(120_000, 30_000)
    store = bench.KeyStore()
    watermark = 0
    for start in range(0, len(ops), 20_000):
        chunk = ops[start:start + 20_000]
        for key, frs in bench.fragments(chunk).items():
            kf = store.load("bench", key, s)
            kf.batch(frs, None, watermark)
            folded = kf.to_bytes()
            store.save(key, kf)
            assert store.load("bench", key, s).to_bytes() == folded
        watermark = max(op.time for op in chunk) - 5_000_000_000
    assert any(store.pages[k] for k in store.pages), "no key reached a cold page"


def test_quick_run_prints_each_phase(bench, capsys):
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    for phase in ("load", "fold", "save", "pages a call"):
        assert phase in out
