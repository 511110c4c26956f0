"""Every thread's stack on stderr, for a probe that crashes or hangs in the native client.

faulthandler writes them from a signal handler, without the interpreter, so they come even
when a thread holds the GIL inside a librdkafka call that never returns and no Python runs.
"""

from __future__ import annotations

import faulthandler
import signal

DUMP_SIGNAL = signal.SIGUSR1  # `kill -USR1` a hung probe: its stacks, and it runs on


def enable_stack_dumps() -> None:
    """A crash (SIGSEGV, SIGABRT, ...) and ``DUMP_SIGNAL`` print every thread's stack to
    stderr. Raises ValueError or io.UnsupportedOperation when stderr has no file descriptor
    (the probe called in-process with stderr captured)."""
    faulthandler.enable(all_threads=True)
    faulthandler.register(DUMP_SIGNAL, all_threads=True)
