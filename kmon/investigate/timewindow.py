"""Time windows over kmon's topics: durations, times, and the window `kmon evidence` reads.

A DURATION is a number with an optional unit (``90``, ``90s``, ``15m``, ``1h``, ``7d``; seconds
when bare). A TIME is unix seconds (``1764140400``, fractions allowed) or ISO-8601
(``2026-11-26T06:00:00Z``; without a zone, UTC). Windows are closed intervals of unix seconds,
compared with Kafka record timestamps (milliseconds).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime

UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhdw]?)")
DEFAULT_SINCE = 3600.0  # --since
DEFAULT_AROUND = 900.0  # --window around --at


class WindowError(ValueError):
    """A bad DURATION, TIME or combination of window flags; the message names the flag."""


@dataclass(frozen=True)
class TimeWindow:
    """A closed interval of unix seconds."""

    start: float
    end: float

    @property
    def start_ms(self) -> int:
        return int(self.start * 1000)

    @property
    def end_ms(self) -> int:
        return int(self.end * 1000)

    def contains_ms(self, ts_ms: int) -> bool:
        return self.start_ms <= ts_ms <= self.end_ms

    def widened(self, seconds: float) -> TimeWindow:
        return TimeWindow(self.start - seconds, self.end + seconds)

    def describe(self) -> str:
        return f"{format_time(self.start)} .. {format_time(self.end)}"


def parse_duration(text: str, flag: str = "duration") -> float:
    """Seconds of a DURATION (``15m``); WindowError naming ``flag`` if not one."""
    m = _DURATION.fullmatch(text.strip().lower())
    if m is None:
        raise WindowError(f"{flag} {text!r} is not a duration (e.g. 90s, 15m, 1h, 7d)")
    seconds = float(m[1]) * UNITS[m[2]]
    if seconds <= 0:
        raise WindowError(f"{flag} {text!r} must be more than zero")
    return seconds


def parse_time(text: str, flag: str = "time") -> float:
    """Unix seconds of a TIME (unix seconds or ISO-8601, UTC when no zone is given)."""
    s = text.strip()
    try:
        return float(s)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise WindowError(f"{flag} {text!r} is neither unix seconds nor an ISO-8601 time "
                          "(e.g. 2026-11-26T06:00:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def format_time(seconds: float) -> str:
    """ISO-8601 UTC to the second, as the table prints it."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WindowFlags:
    """The window flags as given (None when absent)."""

    since: str | None = None
    at: str | None = None
    window: str | None = None
    from_: str | None = None
    to: str | None = None


def resolve_window(flags: WindowFlags, now: float | None = None) -> TimeWindow:
    """The window the flags mean: --since D (default 1h) | --at T [--window D] |
    --from T [--to T]."""
    now = time.time() if now is None else now
    _check_combination(flags)
    if flags.at is not None:
        at = parse_time(flags.at, "--at")
        half = parse_duration(flags.window, "--window") if flags.window else DEFAULT_AROUND
        return TimeWindow(at - half, at + half)
    if flags.from_ is not None:
        start = parse_time(flags.from_, "--from")
        end = parse_time(flags.to, "--to") if flags.to is not None else now
        if end < start:
            raise WindowError(f"--to {flags.to} is before --from {flags.from_}")
        return TimeWindow(start, end)
    since = parse_duration(flags.since, "--since") if flags.since else DEFAULT_SINCE
    return TimeWindow(now - since, now)


def _check_combination(flags: WindowFlags) -> None:
    given = [name for name, value in (("--since", flags.since), ("--at", flags.at),
                                      ("--from", flags.from_)) if value is not None]
    if len(given) > 1:
        raise WindowError(f"{' and '.join(given)} exclude each other: give one window")
    if flags.window is not None and flags.at is None:
        raise WindowError("--window goes with --at")
    if flags.to is not None and flags.from_ is None:
        raise WindowError("--to goes with --from")


def around_times(times: list[float], margin: float) -> TimeWindow | None:
    """From the earliest of ``times`` minus ``margin`` to the latest plus ``margin``; None when
    there are no times (then nothing bounds the read)."""
    if not times:
        return None
    return TimeWindow(min(times) - margin, max(times) + margin)
