"""What a key knows about one offset (a slot of its window) or a loose value, as bits.

Detectors do not test these: they ask the key state (``KeyState.consumed``, ``outcome``...)
and loose records (``Loose.acked``...). ``version_order`` and ``fold`` set them as they place
values; a detector marks its own bookkeeping bits (``CAND``, ``DECIDED``, ``VISIBLE_DONE``,
``UNSEEN_DONE``) through ``KeyState.mark``.
"""

from __future__ import annotations

from typing import Final

# Slot and loose-record flags.
VER: Final = 1 << 0  # in the version order: a poll read it here, or an ok send reported this offset
READ: Final = 1 << 1  # some poll read this value (any outcome)
SENT: Final = 1 << 2  # a send completion reported this offset for this value
W_OK: Final = 1 << 3  # the writer's completion: ok ...
W_INFO: Final = 1 << 4  # ... info ...
W_FAIL: Final = 1 << 5  # ... or fail (none of the three: not known yet)
MULTI: Final = 1 << 6  # the writer op wrote two or more values: the txn stage checks atomicity
GAP: Final = 1 << 7  # empty slot some op read or sent across; the crossing is kept in the slot
GAP_SEND: Final = 1 << 8  # ... and it was between two sends of one op
CAND: Final = 1 << 9  # an absence verdict (lost-write / invisible write) is pending for this slot
DECIDED: Final = 1 << 10  # that verdict, or an unseen verdict, was emitted
READ_OK: Final = 1 << 11  # an ok op read this value: consumed (what lost-write and unseen ask)
VISIBLE_DONE: Final = 1 << 12  # a visible fact was already sent for this value
UNSEEN_DONE: Final = 1 << 13  # an unseen verdict was already emitted for this value
GAP_INT: Final = 1 << 14  # the crossing was within one op: ``val`` holds the offset it started from
# Flags fit in 15 bits: ``flg`` is a vector of signed 16-bit ints.

W_ANY: Final = W_OK | W_INFO | W_FAIL
GAP_BITS: Final = GAP | GAP_SEND | GAP_INT
OCCUPIED: Final = VER | SENT
FLAG_OUTCOME: Final = {W_OK: "ok", W_INFO: "info", W_FAIL: "fail", 0: "unknown"}
