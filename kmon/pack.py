"""`kmon pack`: the monitor's Python side as one archive for Spark executors that do not have
kmon installed (``spark.archives``, PySpark's documented way to ship a virtualenv).

The archive is a virtualenv packed by venv-pack, holding kmon (its checker compiled by mypyc,
as ``make setup`` builds it) and kmon's runtime dependencies at the versions installed beside
this kmon: the driver and the executors exchange pickled checker state, Arrow batches and
pandas frames, so both sides must run the same code. A ``--py-files`` zip cannot do this:
Python cannot import C extensions (the compiled checker, pyarrow) from a zip.

How it is built:

1. ``pip wheel --no-deps`` of the checkout kmon runs from. venv-pack refuses editable
   installs, and ``make setup`` installs the checkout editable; building the wheel compiles
   the checker exactly as an install does (``KMON_COMPILE=0``: uncompiled, also in the wheel).
2. A fresh venv made by this interpreter (``--copies``: see ``build``) gets that wheel and
   kmon's requirements, every package pinned to the version installed here (``pip freeze``)
   - except PySpark and py4j: a Spark cluster puts its own (``$SPARK_HOME/python/lib``) on
   its Python workers' path, the ones that match its JVM, and PySpark's jars are most of its
   450 MB.
3. ``venv-pack`` turns the venv into a ``.tar.gz``.

Executors unpack it where ``spark.archives`` says (``kmon-env.tar.gz#environment``) and run
``./environment/bin/python`` when the driver's ``PYSPARK_PYTHON`` names it. venv-pack does not
pack the interpreter: the executors need the same Python (3.11) at the same path as the
machine that packed it (or ``--python-prefix``, venv-pack's rewrite of that path).

Archives are cached in ``$KMON_CACHE/pack/``, named by a digest of kmon's sources, the pinned
requirements and the interpreter, so packing again after no change takes a second.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

from kmon import env
from kmon._build import hash_files
from kmon.env import SettingError

# Where executors find the unpacked archive: the fragment of spark.archives, and the
# interpreter inside it that PYSPARK_PYTHON names (relative to the executor's work directory).
ALIAS = "environment"
EXECUTOR_PYTHON = f"./{ALIAS}/bin/python"
# The cluster's Spark provides these to its Python workers (see the module docstring).
PROVIDED_BY_SPARK = frozenset({"pyspark", "py4j"})
# What the archive is built from, besides the requirements: the packages' folders (pyproject's
# package-dir) and the build files.
SOURCE_DIRS = ("kmon", "streaming", "probes", "dashboards")
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md")

KEEP = 3  # archives kept in the cache
Log = Callable[[str], None]


def _name(requirement: str) -> str:
    """The normalized project name a requirement string or a ``pip freeze`` line starts with."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


def runtime_requirements() -> list[str]:
    """kmon's own requirements (no extras), less what the cluster's Spark provides."""
    out = []
    for req in metadata.requires("kmon") or []:
        marker = req.partition(";")[2]
        if "extra" not in marker and _name(req) not in PROVIDED_BY_SPARK:
            out.append(req)
    return out


def installed_pins(python: str = sys.executable) -> list[str]:
    """``name==version`` of every package installed beside this kmon (not kmon itself)."""
    freeze = subprocess.run([python, "-m", "pip", "freeze", "--exclude-editable"],
                            capture_output=True, text=True, check=True).stdout
    return sorted(line.strip() for line in freeze.splitlines()
                  if "==" in line and _name(line) not in ("kmon", *PROVIDED_BY_SPARK))


def _files(root: Path) -> Iterable[Path]:
    for name in BUILD_FILES:
        if (root / name).is_file():
            yield root / name
    for d in SOURCE_DIRS:
        for p in sorted((root / d).rglob("*")):
            # Build outputs beside the sources are not inputs (the editable install's .so).
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyc"):
                yield p


def digest(root: Path, pins: list[str], requirements: list[str]) -> str:
    """What the archive depends on: sources, pins, requirements, interpreter, compile flag."""
    h = hashlib.sha256()
    # (_build_stamp.py is written by the build itself)
    hash_files(h, root, (p for p in _files(root) if p.name != "_build_stamp.py"))
    for line in (*pins, "--", *requirements, sys.version, sys.executable,
                 os.environ.get("KMON_COMPILE", "1")):
        h.update(line.encode() + b"\n")
    return h.hexdigest()[:16]


def source_root() -> Path:
    """The checkout kmon is installed from; a SettingError when there is none."""
    root = env.repo_root()
    if root is None:
        raise SettingError("kmon pack builds kmon from its source checkout, and this kmon is "
                           "not installed from one (pip install -e <checkout>)")
    return root


def _run(cmd: list[str], log: Log, cwd: Path | None = None) -> None:
    log("  $ " + " ".join(cmd))
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SettingError(f"{cmd[0]} {' '.join(cmd[1:3])} ... failed "
                           f"(exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")


def build(out: Path, work: Path, root: Path, pins: list[str], requirements: list[str],
          log: Log) -> None:
    """Build the archive at ``out`` in scratch directory ``work`` (steps: module docstring)."""
    import venv_pack  # type: ignore[import-untyped]

    wheels, venv = work / "wheels", work / "venv"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
          "--disable-pip-version-check", "-w", str(wheels), str(root)], log)
    (wheel,) = wheels.glob("kmon-*.whl")
    # --copies: Spark unpacks spark.archives with Hadoop's untar, which drops symbolic links,
    # and bin/python of a venv is one (an executor then finds no ./environment/bin/python).
    _run([sys.executable, "-m", "venv", "--copies", str(venv)], log)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    _run([*pip, "--no-deps", str(wheel)], log)
    _run([*pip, "-c", str(constraints), *requirements], log)
    # Nothing in the archive may need the network or the driver's machine: pip itself stays
    # (harmless), pyspark must not have slipped in through another requirement.
    leaked = [p.name for p in (venv / "lib").glob("python*/site-packages/pyspark")]
    if leaked:
        raise SettingError("the packed environment pulled in pyspark through a dependency")
    log(f"  packing {venv} -> {out}")
    # Level 1: the archive is mostly compiled libraries, which compress little anyway.
    venv_pack.pack(prefix=str(venv), output=str(out), compress_level=1, force=True)


def pack(out: Path | None = None, cache: Path | None = None, log: Log = print,
         source: Path | None = None) -> Path:
    """The archive for this kmon, from the cache or built; copied to ``out`` when given.
    ``source``: kmon's source tree (default: the checkout kmon is installed from; an image
    that installed kmon from its sources names them). Returns the archive's path (``out``, or
    the cached file)."""
    root = source.resolve() if source is not None else source_root()
    if not (root / "pyproject.toml").is_file():
        raise SettingError(f"{root} is not kmon's source tree (no pyproject.toml)")
    pins, requirements = installed_pins(), runtime_requirements()
    name = f"kmon-env-{digest(root, pins, requirements)}.tar.gz"
    cached = env.kmon_cache(cache) / "pack" / name
    if cached.is_file():
        log(f"kmon pack: {cached} is up to date")
    else:
        cached.parent.mkdir(parents=True, exist_ok=True)
        log(f"kmon pack: building {cached.name} (a wheel of {root}, a venv, venv-pack)")
        with tempfile.TemporaryDirectory(prefix="kmon-pack-") as tmp:
            partial = Path(tmp) / name
            build(partial, Path(tmp), root, pins, requirements, log)
            shutil.move(partial, cached)  # whole or not at all: a later run trusts the name
        # Sources change often: keep the newest few (checkouts may share the cache).
        older = sorted(cached.parent.glob("kmon-env-*.tar.gz"), key=lambda p: p.stat().st_mtime)
        for old in older[:-KEEP]:
            old.unlink(missing_ok=True)
    if out is None:
        return cached
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, out)
    return out
