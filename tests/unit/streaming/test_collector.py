"""``collector.paused``: the cyclic collector off inside, as it was after, errors included."""

from __future__ import annotations

import gc

import pytest

from kmon.streaming import collector


def test_paused_restores_the_collector_as_it_was() -> None:
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector.paused():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
