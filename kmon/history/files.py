"""History files: ``load`` and ``iter_ops`` dispatch on the suffix (.json, .jsonl, .edn)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

from kmon.history.errors import HistoryError
from kmon.history.jsonio import Lines, iter_json, iter_jsonl
from kmon.history.model import Op


def _iter_edn(lines: Lines) -> Iterator[Op]:
    # Imported on use: edn_format (and its parser generator) costs ~80 ms to import, which the
    # checker and the Spark job, importing only the model, should not pay.
    from kmon.history.edn import iter_edn

    return iter_edn(lines)


READERS: dict[str, Callable[[Lines], Iterator[Op]]] = {
    ".json": iter_json,
    ".jsonl": iter_jsonl,
    ".edn": _iter_edn,
}


def iter_ops(path: str | Path) -> Iterator[Op]:
    """The ops of the history file at ``path``, lazily; HistoryError names the file and line."""
    reader = _reader(Path(path).suffix.lower(), path)
    try:
        with open(path, "rb") as f:  # bytes, so an encoding error is pinned to its line
            yield from reader(f)
    except HistoryError as e:
        raise e.at(path=str(path)) from None
    except OSError as e:
        raise HistoryError(f"cannot read: {e.strerror or e}", path=str(path)) from None


def load(path: str | Path) -> list[Op]:
    """Every op of the history file at ``path`` (``.json``, ``.jsonl`` or ``.edn``)."""
    return list(iter_ops(path))


def loads(text: str, fmt: str) -> list[Op]:
    """Every op of a history given as text; ``fmt`` is ``json``, ``jsonl`` or ``edn``."""
    reader = _reader("." + fmt.lower().lstrip("."), None)
    return list(reader(io.StringIO(text)))


def _reader(suffix: str, path: str | Path | None) -> Callable[[Lines], Iterator[Op]]:
    try:
        return READERS[suffix]
    except KeyError:
        raise HistoryError(
            f"unknown history format {suffix or '(no suffix)'!r}: expected .json, .jsonl or .edn",
            path=None if path is None else str(path),
        ) from None
