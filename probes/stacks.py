"""Every thread's stack, for a probe that crashes or hangs in the native client.

faulthandler writes them from a signal handler, without the interpreter, so they come even
when a thread holds the GIL inside a librdkafka call that never returns and no Python runs.
"""

from __future__ import annotations

import faulthandler
import re
import signal
import sys
import threading
import traceback
from collections import Counter
from typing import TextIO

DUMP_SIGNAL = signal.SIGUSR1  # `kill -USR1` a hung probe: its stacks, and it runs on

_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]*)", line (?P<line>\d+) in (?P<func>\S+)$')


def enable_stack_dumps(file: TextIO | None = None) -> None:
    """A crash (SIGSEGV, SIGABRT, ...) and ``DUMP_SIGNAL`` write every thread's stack to
    ``file`` (stderr by default). Raises ValueError or io.UnsupportedOperation when it has no
    file descriptor (the probe called in-process with stderr captured)."""
    out = file if file is not None else sys.stderr
    faulthandler.enable(file=out, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, file=out, all_threads=True)


def stack_of(thread: threading.Thread) -> str:
    """``thread``'s Python stack now, as a traceback prints it; "" if it is not running
    (a finished thread's ident may belong to another thread by now)."""
    if not thread.is_alive():
        return ""
    frame = sys._current_frames().get(thread.ident or 0)
    return "".join(traceback.format_stack(frame)) if frame is not None else ""


def innermost_frames(dump: str, most: int = 6) -> str:
    """One line for faulthandler's ``dump``: each thread's innermost Python frame (where a
    native call that never returned was made), the busiest first, as ``func (file:line)``;
    threads in the same place are counted, not repeated. "" when ``dump`` holds no stack."""
    places: Counter[str] = Counter()
    top = False  # the next frame line is a thread's innermost
    for line in dump.splitlines():
        if _THREAD.match(line):
            top = True
            continue
        frame = _FRAME.match(line)
        if frame and top:
            path = frame["path"].rsplit("/", 1)[-1]
            places[f"{frame['func']} ({path}:{frame['line']})"] += 1
        top = False
    shown = [p if n == 1 else f"{n}x {p}" for p, n in places.most_common(most)]
    if len(places) > most:
        shown.append(f"... ({len(places) - most} more places)")
    return "; ".join(shown)
