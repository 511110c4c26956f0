"""The fault model: a fault is started, is in effect for a while, and is stopped (undone).

Every fault records what it did in a ``FaultRecord``: wall-clock timestamps (``time.time()``,
the clock op events carry, so a detection matrix can subtract one from the other), what the
fault found and chose at run time (``info``: the node it paused, the offsets it truncated),
and timed ``marks`` for the steps in between.
"""

from __future__ import annotations

import abc
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from kmon.env import SettingError


class FaultError(RuntimeError):
    """A fault could not be started or undone on the cluster as it is (the message says why)."""


@dataclass
class Mark:
    at: float  # time.time()
    what: str


@dataclass
class FaultRecord:
    """What one fault did, and when. Times are ``time.time()`` seconds, None until reached."""

    fault: str
    params: dict[str, Any]
    invoked_at: float | None = None  # start() called
    started_at: float | None = None  # the fault is in effect
    stop_invoked_at: float | None = None  # stop() called
    stopped_at: float | None = None  # undone (as far as it can be: deleted records stay deleted)
    healthy_at: float | None = None  # the cluster healthy again (when the runner waited for it)
    info: dict[str, Any] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


class Fault(abc.ABC):
    """A bounded fault. Subclasses check their settings in ``__init__`` (fail fast, naming the
    setting) and implement ``_start`` and ``_stop``; ``stop`` is idempotent and safe to call
    after a failed ``start`` (it undoes whatever part of the fault took effect).
    """

    kind: ClassVar[str]

    def __init__(self) -> None:
        self.record = FaultRecord(self.name, self.params())
        self._active = False
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The fault's name in records and matrix rows (``pause``, ``net-latency``, ...)."""
        return self.kind

    @abc.abstractmethod
    def params(self) -> dict[str, Any]:
        """The settings this fault was made with (JSON-able)."""

    @abc.abstractmethod
    def _start(self) -> None: ...

    @abc.abstractmethod
    def _stop(self) -> None: ...

    @property
    def active(self) -> bool:
        return self._active

    def mark(self, what: str) -> None:
        self.record.marks.append(Mark(time.time(), what))

    def start(self) -> FaultRecord:
        with self._lock:
            if self._active:
                raise FaultError(f"{self.name} is already active")
            self.record.invoked_at = time.time()
            self._active = True  # from here on stop() has something to undo
            try:
                self._start()
            except BaseException as exc:
                self.record.error = f"start: {exc}"
                raise
            self.record.started_at = time.time()
            return self.record

    def stop(self) -> FaultRecord:
        with self._lock:
            if not self._active:
                return self.record
            self.record.stop_invoked_at = time.time()
            try:
                self._stop()
            except BaseException as exc:
                self.record.error = (self.record.error + "; " if self.record.error else "") + (
                    f"stop: {exc}"
                )
                raise
            self._active = False
            self.record.stopped_at = time.time()
            return self.record

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


# ---------------------------------------------------------------------------------------------
# Setting checks shared by the faults: each raises SettingError naming the setting.


def check_duration(name: str, value: float | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise SettingError(f"{name}: expected seconds >= 0, got {value!r}")


def check_positive_int(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SettingError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------
# Signals: a fault is undone even on Ctrl-C or SIGTERM.


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, _interrupt) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """No signal may cut an undo short: SIGINT/SIGTERM/SIGHUP are ignored inside."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.2) -> float:
    """Poll ``condition`` until true; returns the seconds it took, FaultError after ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started >= timeout:
            raise FaultError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - started
