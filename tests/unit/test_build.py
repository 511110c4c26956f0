"""The compiled checker: the suite runs the build users get, and a stale build is refused."""

import os
import shutil
from pathlib import Path

import pytest

import kmon
import kmon.checker.fold
import kmon.checker.state
import kmon.history.model
from kmon._build import compiled_sources, refuse_stale_build, sources_digest, write_stamp

KMON_DIR = Path(kmon.__file__).resolve().parent


@pytest.mark.skipif(os.environ.get("KMON_COMPILE") == "0", reason="installed uncompiled")
def test_the_checker_runs_compiled() -> None:
    # A build that quietly fell back to the interpreter would halve the checker's throughput
    # and leave the compiled code, which is what users run, untested.
    for module in (kmon.checker.fold, kmon.checker.state, kmon.history.model):
        assert Path(module.__file__).suffix == ".so", module.__file__


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of kmon's compiled packages' sources, without any build."""
    root = tmp_path / "kmon"
    for src in compiled_sources(KMON_DIR):
        dst = root / src.relative_to(KMON_DIR)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    return root


def _build(tree: Path, digest: str | None) -> None:
    (tree / "checker" / "fold.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    if digest is not None:
        write_stamp(tree, digest)


def test_sources_without_a_build_run_as_they_are(tree: Path) -> None:
    refuse_stale_build(tree)


def test_a_build_of_these_sources_is_accepted(tree: Path) -> None:
    _build(tree, sources_digest(tree))
    refuse_stale_build(tree)


def test_an_edit_after_the_build_is_refused(tree: Path) -> None:
    _build(tree, sources_digest(tree))
    fold = tree / "checker" / "fold.py"
    fold.write_text(fold.read_text() + "\n# edited\n")
    with pytest.raises(ImportError, match="make setup"):
        refuse_stale_build(tree)


def test_a_build_without_its_stamp_is_refused(tree: Path) -> None:
    _build(tree, None)
    with pytest.raises(ImportError, match="built from other sources"):
        refuse_stale_build(tree)


def test_the_digest_covers_every_compiled_module(tree: Path) -> None:
    before = sources_digest(tree)
    for source in compiled_sources(tree):
        source.write_text(source.read_text() + "\n")
        after = sources_digest(tree)
        assert after != before, source
        before = after


@pytest.mark.skipif(os.environ.get("KMON_COMPILE") == "0", reason="installed uncompiled")
def test_the_modules_listed_beside_the_checker_run_compiled() -> None:
    # The monitor's op-event reader and per-fragment loop left kmon/checker/ (monitor code,
    # not the core's): the explicit list in kmon/_build.py must still compile them.
    import kmon.foldrun
    import kmon.history.events
    import kmon.history.fragment

    for module in (kmon.history.fragment, kmon.history.events, kmon.foldrun):
        assert Path(module.__file__).suffix == ".so", module.__file__


def test_the_makefile_reinstalls_when_a_compiled_module_changes() -> None:
    # `make setup` reinstalls (and so recompiles) only when a prerequisite of its install step
    # changes: every module _build.py compiles must be one, or an edit runs into the stale-build
    # guard instead of a rebuild.
    makefile = (KMON_DIR.parent / "Makefile").read_text()
    rule = next(line for line in makefile.splitlines() if line.startswith("$(INSTALLED):"))
    assert "$(wildcard kmon/checker/*.py)" in rule
    for src in compiled_sources(KMON_DIR):
        if src.parent.name != "checker":
            assert src.relative_to(KMON_DIR.parent).as_posix() in rule, src
