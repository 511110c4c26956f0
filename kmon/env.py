"""Where kmon keeps things: the environment variables every part of kmon agrees on.

- ``KMON_HOME``: run-time state of the local stack (generated configs, data dirs, pid files,
  logs). Default ``<repo>/var`` (gitignored), or ``./var`` when kmon is not run from a checkout.
- ``KMON_CACHE``: downloaded artifacts (Kafka jars, the Spark Kafka connector, Maven's local
  repository). Default ``$HOME/.cache/kmon``. Fetched once by ``kmon setup``; nothing at run time
  touches the network.
- ``KMON_PORT_BASE``: first loopback port of the local stack (see ``kmon.local.ports``).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT_BASE = 19092
# One base reserves 100 ports: [base, base+50) for the stack `kmon run` starts and
# [base+50, base+100) for the test suite's own stack, so both can run side by side.
PORT_SPAN = 100


class SettingError(ValueError):
    """A bad setting (unknown override, port in use, missing Java, ...): the message names it.

    The CLI prints it as ``kmon: error: <message>`` with exit status 2.
    """


def repo_root() -> Path | None:
    """The checkout kmon is installed from (editable install), or None."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def kmon_home(override: str | os.PathLike[str] | None = None) -> Path:
    if override:
        return Path(override).expanduser().resolve()
    if env := os.environ.get("KMON_HOME"):
        return Path(env).expanduser().resolve()
    root = repo_root()
    return (root if root else Path.cwd()) / "var"


def kmon_cache(override: str | os.PathLike[str] | None = None) -> Path:
    if override:
        return Path(override).expanduser().resolve()
    if env := os.environ.get("KMON_CACHE"):
        return Path(env).expanduser().resolve()
    return Path.home() / ".cache" / "kmon"


def port_base(override: int | None = None) -> int:
    """The port base from the argument, else ``KMON_PORT_BASE``, else 19092."""
    if override is not None:
        base = override
    else:
        raw = os.environ.get("KMON_PORT_BASE") or str(DEFAULT_PORT_BASE)
        try:
            base = int(raw)
        except ValueError:
            raise SettingError(f"KMON_PORT_BASE must be a port number, got {raw!r}") from None
    if not 1024 <= base <= 65535 - PORT_SPAN:
        raise SettingError(f"port base {base} out of range: use 1024..{65535 - PORT_SPAN}")
    return base
