"""``clients.bounded``: a client call with a hard time bound, and what runs once an abandoned
call returns (the probe closes a consumer whose offset commit hung only then)."""

from __future__ import annotations

import threading

import pytest

from kmon.probes import clients as C


def test_a_call_within_the_bound_returns_or_raises_and_late_never_runs() -> None:
    ran: list[str] = []
    assert C.bounded(lambda x: x + 1, 1, timeout=5, name="t", late=lambda: ran.append("x")) == 2

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        C.bounded(boom, timeout=5, name="t", late=lambda: ran.append("x"))
    assert ran == []


def test_late_runs_once_an_abandoned_call_returns() -> None:
    release, ran = threading.Event(), threading.Event()
    with pytest.raises(C.Hung, match=r"stuck did not return within 0\.05s"):
        C.bounded(release.wait, timeout=0.05, name="stuck", late=ran.set)
    assert not ran.is_set()  # the call is still in progress: its client must not be closed
    release.set()
    assert ran.wait(5)


def test_late_runs_after_an_abandoned_call_raises_too() -> None:
    release, ran = threading.Event(), threading.Event()

    def fail_later() -> None:
        release.wait()
        raise RuntimeError("late failure")

    with pytest.raises(C.Hung):
        C.bounded(fail_later, timeout=0.05, name="stuck", late=ran.set)
    release.set()
    assert ran.wait(5)
