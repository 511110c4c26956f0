"""Which modules mypyc compiles, and a guard against running a build of other sources.

``setup.py`` compiles the checker core into C extensions and records a digest of their
sources in ``_build_stamp.py``. Python imports a compiled module in preference to its ``.py``,
so in a source checkout an edit made after the build would silently not run:
``refuse_stale_build`` (called on ``import kmon``) compares the digests first. Standard library
only: setup.py loads this file by path, before kmon is installed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

KMON_DIR = Path(__file__).resolve().parent
_STAMP = "_build_stamp.py"


# Compiled beside the checker core, named one by one: the op model, whose fields the checker
# reads for every op (an interpreted object's attribute cost about 165 instructions from
# compiled code; a compiled one's is a load), op splitting (the checker's input, made by the
# offline checker and the op-event reader alike), and the monitor's two hot loops: the op-event
# reader and the per-fragment loop over the fold (foldrun, monitor code kept out of the core).
# (Only modules under kmon/ can be listed: mypyc names a module by its path, and streaming/ is
# kmon.streaming only once installed.)
ALSO_COMPILED = ("history/model.py", "history/fragment.py", "history/events.py", "foldrun.py")


def compiled_sources(kmon_dir: Path = KMON_DIR) -> list[Path]:
    """The modules mypyc compiles: the checker's, but for ``_``-prefixed ones (``__init__``),
    and ``ALSO_COMPILED``."""
    checker = [p for p in (kmon_dir / "checker").glob("*.py") if not p.name.startswith("_")]
    return sorted([*checker, *(kmon_dir / name for name in ALSO_COMPILED)])


def hash_files(h: Any, root: Path, paths: Iterable[Path]) -> None:
    """Feed each file's path below ``root`` and its bytes to the hash ``h`` (build caches key
    on this: the protocol proxy's build, ``kmon pack``'s archive)."""
    for path in paths:
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")


def sources_digest(kmon_dir: Path = KMON_DIR) -> str:
    h = hashlib.sha256()
    for path in compiled_sources(kmon_dir):
        h.update(path.relative_to(kmon_dir).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def write_stamp(kmon_dir: Path, digest: str) -> None:
    """Record the digest of the sources being compiled (setup.py, before it compiles them)."""
    (kmon_dir / _STAMP).write_text(f'SOURCES_SHA256 = "{digest}"  # written by setup.py\n')


def _recorded_digest(kmon_dir: Path) -> str | None:
    stamp = kmon_dir / _STAMP
    return stamp.read_text().split('"')[1] if stamp.is_file() else None


def refuse_stale_build(kmon_dir: Path = KMON_DIR) -> None:
    built = list((kmon_dir / "checker").glob("*.so"))
    if not built:
        return  # installed uncompiled (KMON_COMPILE=0): the sources are what runs
    if _recorded_digest(kmon_dir) != sources_digest(kmon_dir):
        raise ImportError(
            f"kmon's compiled modules ({built[0].parent}/*.so) were built from other sources"
            " than the .py files beside them: rebuild with `make setup` (or `pip install -e .`),"
            " or delete kmon/checker/*.so to run the sources uncompiled"
        )
