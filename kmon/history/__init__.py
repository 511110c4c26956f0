"""kmon.history: the op model and its codecs (JSON, JSONL, Jepsen EDN; Avro in ``.avro``).

Everything else in kmon speaks ``Op``; see ``model`` for the data model and ``wire`` for the
JSON/EDN field names, op shapes and the key-typing rule. ``kmon.history.edn.iter_edn`` streams
Jepsen's EDN (imported on use: its parser is slow to import). ``fragment`` splits an op into
what it did to each key, the checker's input, and ``events`` reads the monitor's op events
straight into those fragments. Nothing here imports the checker: ``kmon.checker`` builds on
this package, never the reverse.
"""

from kmon.history.errors import HistoryError
from kmon.history.files import iter_ops, load, loads
from kmon.history.jsonio import (
    JsonlWriter,
    dump_json,
    dump_jsonl,
    iter_json,
    iter_jsonl,
    op_to_json,
)
from kmon.history.model import KeyPlacement, Op, OpMeta, Rebalance, Start, commit, poll, send
from kmon.history.wire import op_from_wire

__all__ = [
    "HistoryError",
    "JsonlWriter",
    "KeyPlacement",
    "Op",
    "OpMeta",
    "Rebalance",
    "Start",
    "commit",
    "dump_json",
    "dump_jsonl",
    "iter_json",
    "iter_jsonl",
    "iter_ops",
    "load",
    "loads",
    "op_from_wire",
    "op_to_json",
    "poll",
    "send",
]
