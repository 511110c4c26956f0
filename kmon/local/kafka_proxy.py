"""The Kafka protocol proxy: Kroxylicious with kmon's fault filters, its build and its server.

Toxiproxy degrades TCP; it cannot make a broker answer wrongly. The Kafka protocol proxy
decodes every request and answer between the probe's clients and the brokers and, when told
to, changes them the way Kafka-compatible brokers were seen to misbehave (spurious offsets,
server-side filtering, torn transactions, aborted reads, duplicates, lost offset commits:
``FAULTS``)::

    client ──► 127.0.0.1:<base+24> bootstrap, <base+24+n> broker n ──► PLAINTEXT listeners
               Kroxylicious, port per node, kmon.proxy.FaultFilter on every connection
               control endpoint (HTTP) on 127.0.0.1:<base+29>

The proxy rewrites metadata answers to advertise its own ports, so a client that bootstraps
through it (``Ports.kafka_proxy_bootstrap``) stays behind it. With no fault switched on it
forwards everything unchanged (the detection matrix's ``kproxy-healthy`` row shows it).

Kroxylicious (Apache-2.0, Maven Central) is the library; kmon's filters are a small Maven
module in ``kmon/local/proxy/`` built by ``install()`` (``kmon nemesis install-tools``) into
``$KMON_CACHE/kafka-proxy-<fingerprint>/lib``, rebuilt when its sources change. Everything
binds 127.0.0.1 only (``kmon.proxy.LoopbackOnly`` and ``Control``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kmon import env
from kmon._build import hash_files
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.java import find_java
from kmon.local.ports import Ports

SOURCE = Path(__file__).resolve().parent / "proxy"
MAIN_CLASS = "kmon.proxy.Main"
MAX_NODE_ID = 4  # port per node for node ids 1..4 (base+25..28)
# The proxy's faults (kmon.proxy.Faults); kmon.nemesis.protocol says what each imitates.
FAULTS = ("spurious-offset", "server-side-filtering", "torn-transaction", "aborted-read",
          "duplicate", "lost-offset-commit")
COMPLETE = ".complete"

Log = Callable[[str], None]


class KafkaProxyError(RuntimeError):
    """The Kafka protocol proxy did not build, start, stop or answer as asked."""


# ---------------------------------------------------------------------------------------------
# The build


def _sources() -> list[Path]:
    return sorted([SOURCE / "pom.xml", *(p for p in (SOURCE / "src").rglob("*") if p.is_file())])


def fingerprint() -> str:
    digest = hashlib.sha256()
    hash_files(digest, SOURCE, _sources())
    return digest.hexdigest()


def dist_dir(cache: Path | None = None) -> Path:
    """Where this checkout's build lives: one folder per source fingerprint (checkouts with
    other sources share the cache without overwriting each other's build)."""
    return (cache or env.kmon_cache()) / f"kafka-proxy-{fingerprint()[:16]}"


def find_dist(cache: Path | None = None) -> Path | None:
    folder = dist_dir(cache)
    return folder if (folder / COMPLETE).is_file() else None


def install(cache: Path | None = None, log: Log = print) -> Path:
    """Build the proxy with Maven (jars from Maven Central) into the cache, once per source
    fingerprint: about a minute on a fresh machine, a stamp check when warm."""
    cache = cache or env.kmon_cache()
    target = dist_dir(cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(cache / ".kafka-proxy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / COMPLETE).is_file():
            log(f"kafka proxy (Kroxylicious + kmon filters): cached at {target}")
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SettingError("Maven (mvn) not found: the Kafka protocol proxy is built with it")
        log(f"kafka proxy: building {SOURCE} with Maven into {target} (about a minute, once)")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            work = Path(tmp, "src")
            shutil.copytree(SOURCE, work)  # Maven writes target/ beside the pom: not in the repo
            cmd = [mvn, "-B", "-q", "-f", str(work / "pom.xml"),
                   f"-Dmaven.repo.local={cache / 'm2'}", "package"]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
                raise SettingError(f"Maven could not build the Kafka proxy:\n{tail}")
            lib = Path(tmp, "dist", "lib")
            shutil.copytree(work / "target" / "lib", lib)
            shutil.copy2(work / "target" / "kmon-kafka-proxy-1.jar", lib)
            Path(tmp, "dist", COMPLETE).write_text(fingerprint() + "\n")
            if target.exists():
                shutil.rmtree(target)
            Path(tmp, "dist").rename(target)
    return target


# ---------------------------------------------------------------------------------------------
# The server


@dataclass(frozen=True)
class Activation:
    """A fault switched on, as the proxy reports it."""

    name: str
    prefix: str
    rate: float
    max: int
    injected: int
    live: bool  # still injecting
    held: bool  # its effects still apply (hidden batches stay hidden)


class LocalKafkaProxy:
    """The local stack's Kafka protocol proxy at ``home`` and ``port_base``. Like
    ``LocalToxiproxy`` the handle keeps nothing in memory: handles on the same home agree."""

    def __init__(self, home: str | os.PathLike[str] | None = None, port_base: int | None = None,
                 cache: str | os.PathLike[str] | None = None) -> None:
        self.home = env.kmon_home(home)
        self.ports = Ports(env.port_base(port_base))
        self.cache = env.kmon_cache(cache)

    @property
    def root(self) -> Path:
        return self.home / "kafka-proxy"

    @property
    def config_path(self) -> Path:
        return self.root / "proxy.yaml"

    @property
    def log_path(self) -> Path:
        return self.root / "proxy.log"

    @property
    def pid_path(self) -> Path:
        return self.root / "pid"

    @property
    def bootstrap(self) -> str:
        return self.ports.kafka_proxy_bootstrap

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.kafka_proxy_control}"

    def config(self) -> dict[str, Any]:
        """Kroxylicious' configuration: one virtual cluster, a port per node, kmon's filter.

        The gateway is given in the provider form 0.12 calls deprecated: its ``gateways`` form
        builds the provider without the plugin registry, so ``kmon.proxy.LoopbackOnly`` could
        not bind it to 127.0.0.1, and neither form has a bind address setting.
        """
        return {
            "virtualClusters": [{
                "name": "kmon",
                "targetCluster": {"bootstrapServers": self.ports.bootstrap},
                "clusterNetworkAddressConfigProvider": {
                    "type": "RangeAwarePortPerNodeClusterNetworkAddressConfigProvider",
                    "config": {"bootstrapAddress": self.bootstrap, "nodeIdRanges": [
                        {"name": "brokers",
                         "range": {"startInclusive": 1, "endExclusive": MAX_NODE_ID + 1}}]}},
            }],
            "filterDefinitions": [{"name": "kmon-faults", "type": "KmonFaults"}],
            "defaultFilters": ["kmon-faults"],
        }

    # --- lifecycle -----------------------------------------------------------------------

    def pid(self) -> int | None:
        return procs.read_pid(self.pid_path, MAIN_CLASS)

    def is_up(self) -> bool:
        return self.pid() is not None

    def up(self, timeout: float = 90.0) -> None:
        """Start the proxy (idempotent) and wait until it forwards."""
        if self.pid() is None:
            self._spawn()
        self.wait_ready(timeout)

    def _spawn(self) -> None:
        dist = find_dist(self.cache)
        if dist is None:
            raise SettingError("the Kafka protocol proxy is not built: run `make setup` "
                               "(kmon nemesis install-tools)")
        for name, port in self.ports.kafka_proxy_ports().items():
            if procs.port_in_use(port):
                raise SettingError(f"port {port} ({name}) is already in use; pick another base "
                                   "with --port-base or KMON_PORT_BASE")
        self.root.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: Kroxylicious reads it as its configuration file.
        self.config_path.write_text(json.dumps(self.config(), indent=1) + "\n")
        cmd = [str(find_java()), "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC",
               "-cp", str(dist / "lib" / "*"), MAIN_CLASS, str(self.config_path),
               str(self.ports.kafka_proxy_control)]
        with open(self.log_path, "a") as log:
            log.write(f"\n=== kmon {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}\n")
        self.pid_path.write_text(f"{procs.spawn(cmd, self.log_path, self.root)}\n")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not (self._answers() and _accepts(self.ports.kafka_proxy)):
            if self.pid() is None:
                raise KafkaProxyError(f"the Kafka proxy exited; end of {self.log_path}:\n"
                                      f"{procs.tail(self.log_path)}")
            if time.monotonic() >= deadline:
                raise KafkaProxyError(f"the Kafka proxy did not answer within {timeout:.0f}s; "
                                      f"see {self.log_path}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            self._call("GET", "/health")
            return True
        except KafkaProxyError:
            return False

    def down(self, timeout: float = 15.0) -> None:
        pid = self.pid()
        if pid is None:
            return
        procs.signal_pid(pid, signal.SIGTERM)
        if not procs.wait_dead(pid, timeout):
            procs.signal_pid(pid, signal.SIGKILL)
            procs.wait_dead(pid, 10.0)
        self.pid_path.unlink(missing_ok=True)

    def status(self) -> str:
        pid = self.pid()
        if pid is None:
            return "stopped"
        return f"running (pid {pid}, bootstrap {self.bootstrap}, control {self.url})"

    # --- the faults ----------------------------------------------------------------------

    def activate(self, name: str, prefix: str = "", rate: float = 1.0, max_count: int = 0,
                 seconds: float = 30.0, hold: float | None = None) -> None:
        """Switch fault ``name`` on for ``seconds`` on topics under ``prefix``; what it did
        stays done for ``hold`` seconds (default: ``seconds``)."""
        check_fault(name)
        query = urllib.parse.urlencode({
            "prefix": prefix, "rate": rate, "max": max_count, "seconds": seconds,
            "hold": seconds if hold is None else hold})
        self._call("POST", f"/faults/{name}?{query}")

    def deactivate(self, name: str) -> None:
        check_fault(name)
        self._call("DELETE", f"/faults/{name}")

    def reset(self) -> None:
        """Every fault off and forgotten (hidden batches shown again)."""
        self._call("POST", "/reset")

    def activations(self) -> dict[str, Activation]:
        return {a["name"]: Activation(**a) for a in self._call("GET", "/faults")["active"]}

    def injections(self, name: str) -> list[str]:
        """The proxy's log lines of what fault ``name`` did (the most recent 200 lines)."""
        return [line.split(" ", 1)[1] for line in self._call("GET", "/faults")["log"]
                if line.split(" ", 2)[1].rstrip(":") == name]

    def problems(self) -> list[str]:
        """A fault still injecting (what a stopped fault holds until its row is done, hidden
        batches, is not a problem of the cluster's health: ``held`` says it)."""
        if not self.is_up():
            return []
        return [f"Kafka proxy fault {a.name} is still on" for a in self.activations().values()
                if a.live]

    def held(self) -> list[str]:
        """Faults whose effects still apply (``reset`` undoes them)."""
        if not self.is_up():
            return []
        return [a.name for a in self.activations().values() if a.live or a.held]

    def _call(self, method: str, path: str) -> Any:
        request = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            raise KafkaProxyError(f"Kafka proxy {method} {path}: HTTP {exc.code} {detail}"
                                  ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise KafkaProxyError(f"Kafka proxy control at {self.url} unreachable: {exc}") from None
        return json.loads(text) if text.strip().startswith(("{", "[")) else text


def check_fault(name: str) -> None:
    if name not in FAULTS:
        raise SettingError(f"Kafka proxy fault {name!r}: one of {', '.join(FAULTS)}")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False

