"""Jepsen's ``history.edn``: one op map per line (or per top-level form), or a single vector of ops.

Parsed with ``edn_format``. EDN values become plain Python: keywords and symbols become strings
without the colon (``:send`` -> ``"send"``, ``:nemesis`` -> ``"nemesis"``), vectors and lists
become lists, sets frozensets, maps dicts; ``#jepsen.history.Op{...}`` records (and the
``#error``/``#object`` tags Clojure prints for exceptions) are read as their plain contents.
Key types are kept as written, so the JSON key-typing rule does not apply. Op shapes and field
names are those of ``kmon.history.wire``.

``edn_format`` builds its parser tables on every call (about 10 ms), so top-level forms are found
here with a small bracket scanner and parsed in batches; a batch that fails is bisected to report
the first bad form's line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import edn_format

from kmon.history.errors import HistoryError
from kmon.history.jsonio import Lines, text_lines
from kmon.history.model import Op
from kmon.history.wire import OpReader

BATCH = 256

_SPECIAL = re.compile(r'[\[\](){}";\\]')
_STRING_REST = re.compile(r'(?:[^"\\]|\\[\s\S])*"')  # from inside a string to its closing quote
_BLANK = " \t\r\n,"  # commas are whitespace in EDN


def _untagged(value: Any) -> Any:
    return value


# edn_format's tag registry is process-wide; these handlers only make otherwise fatal tags
# readable, so registering them globally cannot change how other EDN parses in the process.
for _tag in ("jepsen.history.Op", "error", "object"):
    edn_format.add_tag(_tag, _untagged)


def iter_edn(lines: Lines) -> Iterator[Op]:
    """Ops of a Jepsen EDN history, lazily (in batches of ``BATCH`` forms)."""
    reader = OpReader(json_keys=False)
    batch: list[tuple[int, str]] = []
    for form in _forms(text_lines(lines)):
        batch.append(form)
        if len(batch) == BATCH:
            yield from _read_batch(batch, reader)
            batch = []
    yield from _read_batch(batch, reader)


def _read_batch(batch: list[tuple[int, str]], reader: OpReader) -> Iterator[Op]:
    for (line, _), value in zip(batch, _parse(batch), strict=True):
        yield reader.read(plain(value), line)


def _parse(forms: list[tuple[int, str]]) -> list[Any]:
    """One parsed value per form; bisects a failing batch down to the bad form."""
    if not forms:
        return []
    try:
        values = edn_format.loads_all("\n".join(text for _, text in forms), write_ply_tables=False)
    except Exception as e:  # the parser raises many types on bad input
        if len(forms) == 1:
            raise HistoryError(f"invalid EDN: {_describe(e)}", line=forms[0][0]) from None
        values = None
    if values is not None and len(values) == len(forms):
        return values
    if len(forms) == 1:
        raise HistoryError(f"expected one op map, found {len(values)} values", line=forms[0][0])
    mid = len(forms) // 2
    return _parse(forms[:mid]) + _parse(forms[mid:])


def _describe(e: Exception) -> str:
    if isinstance(e, NotImplementedError):  # edn_format's unknown-tag error
        return str(e).replace("ImmutableDict(", "#").rstrip(")")
    return str(e) or type(e).__name__


def plain(x: Any) -> Any:
    """An ``edn_format`` value as plain Python (see the module docstring)."""
    t = type(x)
    if t is int or t is str or x is None:  # most of a history, checked first for speed
        return x
    if t is edn_format.ImmutableList or t is tuple or t is list:
        return [plain(v) for v in x]
    if t is edn_format.Keyword or t is edn_format.Symbol:
        return x.name
    if isinstance(x, Mapping):
        return {_hashable(plain(k)): plain(v) for k, v in x.items()}
    if isinstance(x, frozenset):
        return frozenset(_hashable(plain(v)) for v in x)
    return x  # bool, float, Char (a str), datetime, UUID, ...


def _hashable(value: Any) -> Any:
    """Map keys and set members must stay hashable: lists and maps inside them become tuples."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value


class _Scanner:
    """Finds top-level EDN forms line by line: brackets, strings, chars and comments only.

    A file whose first form is a vector is taken as a vector of ops: its elements are the forms.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.base: int | None = None  # depth at which forms live: 0, or 1 inside the vector
        self.closed = False  # the vector of ops has ended
        self.in_string = False
        self.start: int | None = None  # line on which the current form started
        self.buf: list[str] = []

    def feed(self, lineno: int, line: str) -> Iterator[tuple[int, str]]:
        pos = chunk = 0
        while pos < len(line):
            if self.in_string:
                m = _STRING_REST.match(line, pos)
                self.in_string = m is None
                pos = len(line) if m is None else m.end()
                continue
            m = _SPECIAL.search(line, pos)
            stop = len(line) if m is None else m.start()
            if line[pos:stop].strip(_BLANK):
                self._begin(lineno)
            if m is None:
                break
            pos, c = m.end(), m.group()
            if c == ";":
                pos = len(line)
            elif c in '"\\':
                self._begin(lineno)
                self.in_string = c == '"'
                pos += c == "\\"  # a character literal such as \] is not a bracket
            elif c in "([{":
                if self.base is None and c == "[":
                    self.base, self.depth, chunk = 1, 1, pos
                    continue
                self._begin(lineno)
                self.depth += 1
            else:
                form = self._close(lineno, line, chunk, pos)
                if form is not None:
                    yield form
                if self.start is None:
                    chunk = pos
        if self.start is not None:
            self.buf.append(line[chunk:])

    def _begin(self, lineno: int) -> None:
        if self.base is None:
            self.base = 0
        if self.closed:
            raise HistoryError("text after the vector of ops", line=lineno)
        if self.start is None:
            self.start = lineno

    def _close(self, lineno: int, line: str, chunk: int, pos: int) -> tuple[int, str] | None:
        self.depth -= 1
        if self.base == 1 and self.depth == 0 and not self.closed:
            # the vector of ops ends; a pending scalar "form" is handed on to fail its parse
            self.closed = True
            return self._take(line, chunk, pos - 1) if self.start is not None else None
        if self.depth < (self.base or 0):
            raise HistoryError("unbalanced closing bracket", line=lineno)
        if self.depth == self.base and self.start is not None:
            return self._take(line, chunk, pos)
        return None

    def _take(self, line: str, chunk: int, end: int) -> tuple[int, str]:
        form = (self.start, "".join(self.buf) + line[chunk:end])
        self.buf, self.start = [], None
        return form

    def finish(self, last_line: int) -> Iterator[tuple[int, str]]:
        """The unterminated remainder, if any, so that its parse reports its line."""
        if self.start is not None:
            yield self.start, "".join(self.buf)
        elif self.base == 1 and not self.closed:
            raise HistoryError("unterminated vector of ops", line=last_line)


def _forms(lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """(start line, text) of each op form."""
    scanner = _Scanner()
    lineno = 0
    for lineno, line in lines:
        yield from scanner.feed(lineno, line)
    yield from scanner.finish(lineno)
