"""JSON (an array of ops) and JSONL (one op a line) histories: streaming readers and writers.

Field names, op shapes and the key-typing rule for poll maps are in ``kmon.history.wire``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterable, Iterator
from typing import Any, TextIO

from kmon.history.errors import HistoryError
from kmon.history.model import Op
from kmon.history.wire import KeyTyping, OpReader, op_to_wire

Lines = Iterable[str] | Iterable[bytes]

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def text_lines(lines: Lines) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of each line; bytes lines must be UTF-8."""
    lineno = 0
    try:
        for lineno, line in enumerate(lines, 1):
            yield lineno, _decode(line, lineno)
    except UnicodeDecodeError as e:  # raised by a text-mode file while reading the next line
        raise HistoryError(f"not UTF-8 text ({e.reason})", line=lineno + 1) from None


def _decode(line: str | bytes, lineno: int) -> str:
    if isinstance(line, str):
        return line
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HistoryError(f"not UTF-8 text ({e.reason})", line=lineno) from None


def iter_jsonl(lines: Lines) -> Iterator[Op]:
    """Ops of a JSONL history, one JSON object a line (blank lines skipped), lazily."""
    reader = OpReader(json_keys=True)
    for lineno, line in text_lines(lines):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            raise HistoryError(f"invalid JSON: {e.msg} (column {e.colno})", line=lineno) from None
        yield reader.read(raw, lineno)


def iter_json(lines: Lines) -> Iterator[Op]:
    """Ops of a JSON history (one array of op objects, any layout); read whole, decoded lazily."""
    text = "".join(line for _, line in text_lines(lines))
    reader = OpReader(json_keys=True)
    for lineno, raw in _array_items(text):
        yield reader.read(raw, lineno)


def _array_items(text: str) -> Iterator[tuple[int, Any]]:
    """(line, value) of each element of the JSON array ``text``, with the line it starts on."""
    lines = _LineCounter(text)
    pos = _WS.match(text).end()
    if text[pos : pos + 1] != "[":
        raise HistoryError("expected a JSON array of ops", line=lines.at(pos))
    pos = _WS.match(text, pos + 1).end()
    if text[pos : pos + 1] == "]":
        pos = _WS.match(text, pos + 1).end()
    else:
        pos = yield from _array_elements(text, pos, lines)
    if pos < len(text):
        raise HistoryError("invalid JSON: text after the array of ops", line=lines.at(pos))


def _array_elements(
    text: str, pos: int, lines: _LineCounter
) -> Generator[tuple[int, Any], None, int]:
    """Yield the elements from ``pos`` up to the closing bracket; return the position after."""
    while True:
        start = lines.at(pos)
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise HistoryError(f"invalid JSON: {e.msg} (column {e.colno})", line=e.lineno) from None
        yield start, value
        pos = _WS.match(text, pos).end()
        sep = text[pos : pos + 1]
        if sep not in (",", "]"):
            raise HistoryError("invalid JSON: expected ',' or ']' after an op", line=lines.at(pos))
        pos = _WS.match(text, pos + 1).end()
        if sep == "]":
            return pos


class _LineCounter:
    """Line numbers of increasing positions in one text, counting each newline once."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int) -> int:
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


class JsonlWriter:
    """Writes ops to a text file as JSONL, one op a line, in the shapes the loader reads back.

    It keeps the keys already written so each poll map comes back with its key types (see the
    key-typing rule in ``kmon.history.wire``); write one history through one writer.
    """

    def __init__(self, file: TextIO) -> None:
        self.file = file
        self.typing = KeyTyping()

    def write(self, op: Op) -> None:
        self.file.write(self.line(op))

    def line(self, op: Op) -> str:
        return json.dumps(op_to_wire(op, self.typing), separators=(",", ":")) + "\n"


def dump_jsonl(ops: Iterable[Op], file: TextIO) -> None:
    """Write ``ops`` to ``file`` as JSONL."""
    writer = JsonlWriter(file)
    for op in ops:
        writer.write(op)


def dump_json(ops: Iterable[Op], file: TextIO) -> None:
    """Write ``ops`` to ``file`` as one JSON array, one op a line."""
    writer = JsonlWriter(file)
    sep = "[\n"
    for op in ops:
        file.write(sep + writer.line(op).rstrip("\n"))
        sep = ",\n"
    file.write("[]\n" if sep == "[\n" else "\n]\n")


def op_to_json(op: Op) -> dict[str, Any]:
    """``op`` as a JSON-ready dict in Jepsen's wire shapes (as if it were a whole history)."""
    return op_to_wire(op)
