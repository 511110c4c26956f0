"""Builds the checker core into C extensions with mypyc; everything else is in pyproject.toml.

The same typed Python source, compiled: the checker's throughput target (issue 4) needs it.
``KMON_COMPILE=0`` installs the modules as plain Python (no C compiler needed): the same
behaviour, slower. ``kmon/_build.py`` lists the modules and guards against stale builds.
"""

import importlib.util
import os
from pathlib import Path

from setuptools import setup


def _load_build_module():
    spec = importlib.util.spec_from_file_location("kmon_build", Path("kmon/_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compiled_extensions() -> list:
    if os.environ.get("KMON_COMPILE", "1") == "0":
        return []
    from mypyc.build import mypycify

    build = _load_build_module()
    kmon_dir = Path("kmon").resolve()
    sources = [str(p.relative_to(kmon_dir.parent)) for p in build.compiled_sources(kmon_dir)]
    # What refuse_stale_build checks on import: the digest of exactly these sources.
    build.write_stamp(kmon_dir, build.sources_digest(kmon_dir))
    # mypy checks the compiled modules' types first (an error stops the build); modules they
    # import are followed silently, and third-party ones need no stubs.
    options = ["--ignore-missing-imports", "--follow-imports=silent"]
    return mypycify([*options, *sources], group_name="kmon.checker._compiled")


setup(ext_modules=_compiled_extensions())
