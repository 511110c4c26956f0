"""The cyclic garbage collector, paused around the Python workers' per-batch work.

Reading a batch of events and folding a key's fragments allocate hundreds of thousands of small
objects (tuples, lists, fragments) that form no cycles: reference counting frees every one of
them. The cyclic collector still walks them each time a few hundred accumulate, and in a worker
whose heap holds pyspark, pandas and pyarrow that cost as much as the work itself: the reading
step took 10.6 us an event with the collector running and 5.5 us with it paused (200k synthetic
events, one core). A cycle made meanwhile (an exception's traceback, say) is collected once the
collector runs again.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block, then as it was. Never around a ``yield`` of a
    generator: one suspended and never resumed would leave it off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
