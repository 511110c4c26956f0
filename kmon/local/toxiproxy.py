"""Toxiproxy between clients and brokers: its installation, its server, and its HTTP API.

Toxiproxy (Shopify) is a TCP proxy whose connections can be degraded on demand by *toxics*:
latency, stalls, resets, bandwidth limits, slicing. The local stack runs one ``toxiproxy-server``
with one proxy per broker (ports in ``kmon.local.ports``)::

    client ──► 127.0.0.1:<base+6..8>  proxy ``broker-N`` ──► PROXIED listener <base+3..5>
                                                           (advertises the proxies)

A client that bootstraps through the proxies (``LocalCluster.proxied_bootstrap``) is handed the
proxies' addresses in every metadata answer, so all its connections stay behind them; clients
on the plain bootstrap are never affected, nor is broker-to-broker traffic (replication and the
controller quorum stay on their direct listeners).

State lives under ``<KMON_HOME>/toxiproxy/``: ``proxies.json`` (the proxies the server creates
at start), ``server.log`` and a ``pid`` file. The server keeps toxics in memory only, so a
restart starts clean. The binary is built once by ``go install`` of a pinned version into
``$KMON_CACHE/bin`` (``install()``, run by ``kmon nemesis install-tools`` in ``make setup``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kmon import env
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.ports import BROKER_IDS, Ports

# Pinned so every machine injects the same faults. v2.12.0 (March 2025) is the newest release;
# the Go proxy's `@latest` still says v2.5.0, so the pin must be explicit.
PACKAGE = "github.com/Shopify/toxiproxy/v2/cmd/server"
VERSION = "v2.12.0"
BINARY = "toxiproxy-server"

# Toxic types the server knows, with the attributes each takes (Toxiproxy's README).
TOXIC_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "latency": ("latency", "jitter"),           # ms added to each chunk, +/- jitter ms
    "bandwidth": ("rate",),                     # KB/s
    "slow_close": ("delay",),                   # ms before a close goes through
    "timeout": ("timeout",),                    # stall all data; close after ms (0: never)
    "reset_peer": ("timeout",),                 # TCP RST after ms
    "slicer": ("average_size", "size_variation", "delay"),  # bytes, bytes, microseconds
    "limit_data": ("bytes",),                   # close after this many bytes
}
STREAMS = ("downstream", "upstream")  # downstream: broker -> client; upstream: client -> broker

Log = Callable[[str], None]


# Seconds an API call may take. A stopped server refuses at once; a running one answered a
# chaos step's call in more than 5 s at load average 110 on 2 cores, failing the step.
API_TIMEOUT = 30.0

class ToxiproxyError(RuntimeError):
    """The Toxiproxy server did not start, stop or answer as asked."""


def proxy_name(node: int | str) -> str:
    """A Kafka broker's proxy by node id; any other proxy (``tansu``) by its own name."""
    return node if isinstance(node, str) else f"broker-{node}"


# ---------------------------------------------------------------------------------------------
# Installation


def bin_dir(cache: Path | None = None) -> Path:
    return (cache or env.kmon_cache()) / "bin"


def find_binary(cache: Path | None = None) -> Path | None:
    """The installed ``toxiproxy-server`` of the pinned version, else one on PATH, else None."""
    target = bin_dir(cache) / BINARY
    stamp = bin_dir(cache) / f".{BINARY}.version"
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == VERSION:
        return target
    on_path = shutil.which(BINARY)
    return Path(on_path) if on_path else None


def install(cache: Path | None = None, log: Log = print) -> Path:
    """``go install`` the pinned ``toxiproxy-server`` into ``$KMON_CACHE/bin`` (once).

    About 35 s on a fresh machine (module download and build); a warm run is a stamp check.
    """
    cache = cache or env.kmon_cache()
    target = bin_dir(cache) / BINARY
    stamp = bin_dir(cache) / f".{BINARY}.version"
    target.parent.mkdir(parents=True, exist_ok=True)
    # Several checkouts share the cache: one build at a time, the others find it done.
    with open(target.parent / f".{BINARY}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and stamp.is_file() and stamp.read_text().strip() == VERSION:
            log(f"{BINARY} {VERSION}: cached at {target}")
            return target
        go = shutil.which("go")
        if go is None:
            raise SettingError(f"{BINARY}: `go` not found; install Go to build {PACKAGE}@{VERSION}")
        log(f"{BINARY} {VERSION}: go install {PACKAGE}@{VERSION} (about a minute, once)")
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            build_env = {**os.environ, "GOBIN": tmp, "CGO_ENABLED": "0"}
            subprocess.run([go, "install", f"{PACKAGE}@{VERSION}"], env=build_env, check=True)
            # The package is cmd/server, so Go names the binary `server`.
            Path(tmp, "server").replace(target)
        stamp.write_text(VERSION + "\n")
    return target


# ---------------------------------------------------------------------------------------------
# The API's view of things


@dataclass(frozen=True)
class Toxic:
    name: str
    type: str
    stream: str = "downstream"
    toxicity: float = 1.0  # probability that a connection gets the toxic
    attributes: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "type": self.type, "stream": self.stream,
            "toxicity": self.toxicity, "attributes": dict(self.attributes),
        }


@dataclass(frozen=True)
class Proxy:
    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: list[Toxic]

    @property
    def clean(self) -> bool:
        return self.enabled and not self.toxics


def check_toxic(toxic: Toxic) -> None:
    """Fail naming the bad field: unknown type, stream or attribute, a negative value."""
    if toxic.type not in TOXIC_ATTRIBUTES:
        raise SettingError(
            f"unknown toxic type {toxic.type!r}: one of {', '.join(TOXIC_ATTRIBUTES)}"
        )
    if toxic.stream not in STREAMS:
        raise SettingError(f"toxic stream {toxic.stream!r}: one of {', '.join(STREAMS)}")
    if not 0.0 <= toxic.toxicity <= 1.0:
        raise SettingError(f"toxicity {toxic.toxicity}: must be within 0..1")
    allowed = TOXIC_ATTRIBUTES[toxic.type]
    for key, value in toxic.attributes.items():
        if key not in allowed:
            raise SettingError(
                f"{toxic.type} toxic has no attribute {key!r} (it takes {', '.join(allowed)})"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SettingError(f"{toxic.type} toxic {key}={value!r}: expected an integer >= 0")


# ---------------------------------------------------------------------------------------------
# The server


class LocalToxiproxy:
    """The local stack's Toxiproxy server at ``home`` and ``port_base`` (``kmon.env`` defaults).

    Like ``LocalCluster`` the handle keeps nothing in memory: handles on the same home agree.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        port_base: int | None = None,
        cache: str | os.PathLike[str] | None = None,
    ) -> None:
        self.home = env.kmon_home(home)
        self.ports = Ports(env.port_base(port_base))
        self.cache = env.kmon_cache(cache)

    # --- where things are ----------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.home / "toxiproxy"

    @property
    def config_path(self) -> Path:
        return self.root / "proxies.json"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    @property
    def pid_path(self) -> Path:
        return self.root / "pid"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.toxiproxy_api}"

    def proxies_config(self) -> list[dict[str, Any]]:
        return [
            {
                "name": proxy_name(n),
                "listen": f"127.0.0.1:{self.ports.proxy(n)}",
                "upstream": f"127.0.0.1:{self.ports.proxied_listener(n)}",
                "enabled": True,
            }
            for n in BROKER_IDS
        ]

    # --- lifecycle -----------------------------------------------------------------------

    def pid(self) -> int | None:
        return procs.read_pid(self.pid_path, str(self.config_path))

    def is_up(self) -> bool:
        return self.pid() is not None

    def up(self, timeout: float = 15.0) -> None:
        """Start the server with one proxy per broker (idempotent), wait for its API."""
        if self.pid() is not None:
            self.wait_ready(timeout)
            self.ensure_proxies()
            return
        binary = find_binary(self.cache)
        if binary is None:
            raise SettingError(
                f"{BINARY} not installed: run `make setup` (kmon nemesis install-tools)"
            )
        for name, port in self.ports.toxiproxy_ports().items():
            if procs.port_in_use(port):
                raise SettingError(
                    f"port {port} ({name}) is already in use; pick another base with "
                    "--port-base or KMON_PORT_BASE"
                )
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self.proxies_config(), indent=1) + "\n")
        cmd = [
            str(binary), "-host", "127.0.0.1", "-port", str(self.ports.toxiproxy_api),
            "-config", str(self.config_path),
        ]
        with open(self.log_path, "a") as log:
            log.write(f"\n=== kmon {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}\n")
        pid = procs.spawn(cmd, self.log_path, self.root)
        self.pid_path.write_text(f"{pid}\n")
        self.wait_ready(timeout)
        self.ensure_proxies()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._call("GET", "/version")
                return
            except ToxiproxyError:
                if self.pid() is None:
                    raise ToxiproxyError(
                        f"{BINARY} exited; end of {self.log_path}:\n{procs.tail(self.log_path)}"
                    ) from None
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)

    def ensure_proxies(self) -> None:
        """Create any broker proxy the server lacks (``-config`` creates them at start)."""
        have = self.proxies()
        for spec in self.proxies_config():
            if spec["name"] not in have:
                self._call("POST", "/proxies", spec)

    def down(self, timeout: float = 10.0) -> None:
        pid = self.pid()
        if pid is not None:
            procs.terminate(self.pid_path, pid, timeout)

    def status(self) -> str:
        pid = self.pid()
        if pid is None:
            return "stopped"
        return f"running (pid {pid}, API {self.url})"

    # --- the API -------------------------------------------------------------------------

    def proxies(self) -> dict[str, Proxy]:
        raw = self._call("GET", "/proxies")
        return {
            name: Proxy(
                name=name, listen=p["listen"], upstream=p["upstream"], enabled=p["enabled"],
                toxics=[
                    Toxic(t["name"], t["type"], t["stream"], float(t.get("toxicity", 1.0)),
                          dict(t.get("attributes") or {}))
                    for t in p.get("toxics") or []
                ],
            )
            for name, p in raw.items()
        }

    def add_toxic(self, node_id: int | str, toxic: Toxic) -> None:
        check_toxic(toxic)
        self._call("POST", f"/proxies/{proxy_name(node_id)}/toxics", toxic.as_json())

    def remove_toxic(self, node_id: int | str, name: str) -> None:
        """Remove toxic ``name`` from broker ``node_id``'s proxy (no error if it is gone)."""
        with contextlib.suppress(ToxiproxyNotFound):
            self._call("DELETE", f"/proxies/{proxy_name(node_id)}/toxics/{name}")

    def set_enabled(self, node_id: int | str, enabled: bool) -> None:
        """Disable (close every connection, refuse new ones) or re-enable a broker's proxy."""
        self._call("POST", f"/proxies/{proxy_name(node_id)}", {"enabled": enabled})

    def add_proxy(self, name: str, listen: int, upstream: int) -> None:
        """A proxy beside the brokers' (tansu's), from 127.0.0.1:``listen`` to ``upstream``;
        replaced if one of that name exists. The server forgets it when it restarts."""
        self.remove_proxy(name)
        self._call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{listen}",
                                        "upstream": f"127.0.0.1:{upstream}", "enabled": True})

    def remove_proxy(self, name: str) -> None:
        with contextlib.suppress(ToxiproxyNotFound):
            self._call("DELETE", f"/proxies/{name}")

    def reset(self) -> None:
        """Every proxy enabled, every toxic removed."""
        self._call("POST", "/reset")

    def problems(self) -> list[str]:
        """What keeps the proxies from being clean: a disabled proxy, a toxic left behind."""
        if self.pid() is None:
            return ["toxiproxy-server is not running"]
        out = []
        for name, proxy in sorted(self.proxies().items()):
            if not proxy.enabled:
                out.append(f"proxy {name} is disabled")
            out += [f"proxy {name} has toxic {t.name} ({t.type})" for t in proxy.toxics]
        return out

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=API_TIMEOUT) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            cls = ToxiproxyNotFound if exc.code == 404 else ToxiproxyError
            raise cls(f"Toxiproxy {method} {path}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ToxiproxyError(f"Toxiproxy API at {self.url} unreachable: {exc}") from None
        return json.loads(text) if text.strip() else None


class ToxiproxyNotFound(ToxiproxyError):
    """The API answered 404: no such proxy or toxic."""


@contextlib.contextmanager
def toxic(proxy: LocalToxiproxy, node_id: int | str, spec: Toxic) -> Iterator[None]:
    """A toxic on broker ``node_id``'s proxy for the duration of the ``with`` block."""
    proxy.add_toxic(node_id, spec)
    try:
        yield
    finally:
        proxy.remove_toxic(node_id, spec.name)
