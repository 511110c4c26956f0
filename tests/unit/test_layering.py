"""Which kmon packages the pure ones may import: the history codecs nothing of kmon's but
themselves, the checker core nothing but itself and the history (no monitor code)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kmon

KMON_DIR = Path(kmon.__file__).resolve().parent

ALLOWED = {
    "history": ("kmon.history",),
    "checker": ("kmon.checker", "kmon.history"),
}


def _kmon_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "kmon" or n.startswith("kmon.")}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_pure_package_imports_only_what_it_builds_on(package: str) -> None:
    allowed = ALLOWED[package]
    for path in sorted((KMON_DIR / package).glob("*.py")):
        for name in _kmon_imports(path):
            assert any(name == a or name.startswith(a + ".") for a in allowed), (path.name, name)


def test_the_tour_names_every_checker_module() -> None:
    # docs/checker.md's "A tour of the code" must follow the layout it describes.
    doc = (KMON_DIR.parent / "docs" / "checker.md").read_text()
    tour = doc[doc.index("## A tour of the code"):doc.index("## Throughput")]
    for path in sorted((KMON_DIR / "checker").glob("*.py")):
        if not path.name.startswith("_"):
            assert f"`{path.name}`" in tour, path.name
