"""A Spark standalone cluster on loopback: one master and workers 1..2, started with the
installed pyspark's own launcher (``$SPARK_HOME/bin/spark-class``, SPARK_HOME being the pyspark
package), for running the monitor on a real cluster (``kmon monitor --master spark://...``).

The workers run as a cluster's workers would: their environment has nothing of kmon's. The
virtualenv kmon runs from is taken off their ``PATH`` and ``PYTHONPATH``, ``VIRTUAL_ENV`` and
``PYSPARK_PYTHON`` are dropped, so a Python worker an executor starts can import kmon only from
what the application ships (``kmon pack``'s archive through ``spark.archives``).
``daemon_env()`` is that environment, for checking it.

Ports (``kmon.local.ports``): master ``base+44`` (web UI ``+45``), worker ``n`` ``base+46+2(n-1)``
(web UI one above); everything binds 127.0.0.1 (``SPARK_LOCAL_IP``, executors included).
Executors, the driver and their block managers take free ports on loopback, as in local mode.

State under ``<KMON_HOME>/spark-standalone/``: ``master/`` and ``worker-N/``, each with its
properties file (also what identifies its process, see ``kmon.local.procs``), log and pid file;
a worker's ``work/`` holds its executors' directories (their logs, the unpacked archives) and
``local/`` their shuffle files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kmon import env
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.java import check_java
from kmon.local.ports import SPARK_WORKER_IDS, Ports

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Environment variables that would hand the daemons (and so the executors' Python workers)
# the Python environment kmon runs from.
_PYTHON_VARS = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON",
                "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")


def spark_home() -> Path:
    """The installed pyspark package, which is a Spark distribution (bin/, jars/, python/lib)."""
    from kmon.local.artifacts import _pyspark_jars

    return _pyspark_jars().parent


class SparkStandalone:
    """The master and workers of one local stack (``home``, ``port_base``: ``kmon.env``).

    Each worker offers ``cores`` cores and ``memory`` to executors (one executor per worker
    and application; Spark counts cores as slots, not as the machine's CPUs).
    """

    def __init__(self, home: str | os.PathLike[str] | None = None,
                 port_base: int | None = None, cores: int = 2, memory: str = "2g") -> None:
        self.home = env.kmon_home(home)
        self.ports = Ports(env.port_base(port_base))
        self.cores, self.memory = cores, memory

    # --- where things are ----------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.home / "spark-standalone"

    def _dir(self, worker: int | None) -> Path:
        return self.root / ("master" if worker is None else f"worker-{worker}")

    def _properties(self, worker: int | None) -> Path:
        return self._dir(worker) / "spark.properties"

    def log_path(self, worker: int | None = None) -> Path:
        return self._dir(worker) / "daemon.log"

    def work_dir(self, worker: int) -> Path:
        return self._dir(worker) / "work"

    def local_dir(self, worker: int) -> Path:
        """Its executors' shuffle files (``SPARK_LOCAL_DIRS``)."""
        return self._dir(worker) / "local"

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.ports.spark_master}"

    # --- the daemons' environment ------------------------------------------------------------

    def daemon_env(self, worker: int | None = None) -> dict[str, str]:
        """The environment of a daemon (and of the executors it starts): this process's,
        without kmon's virtualenv, on loopback, with Java and SPARK_HOME."""
        out = {k: v for k, v in os.environ.items() if k not in _PYTHON_VARS}
        venv = Path(sys.prefix).resolve()
        out["PATH"] = os.pathsep.join(
            p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(venv))
        java = check_java().resolve()
        out["JAVA_HOME"] = str(java.parent.parent)
        out["SPARK_HOME"] = str(spark_home())
        out["SPARK_LOCAL_IP"] = "127.0.0.1"
        out["SPARK_LOG_DIR"] = str(self._dir(worker))
        if worker is not None:
            out["SPARK_LOCAL_DIRS"] = str(self.local_dir(worker))
        return out

    # --- lifecycle -----------------------------------------------------------------------

    def pid(self, worker: int | None = None) -> int | None:
        """The daemon's pid (``worker`` None: the master's), if it runs."""
        return procs.read_pid(self._dir(worker) / "pid", str(self._properties(worker)))

    def up(self, timeout: float = 120.0) -> None:
        """Start the master and every worker that is not running (idempotent); return once
        the master counts every worker alive."""
        if self.pid() is None:
            self._clear_stopped_workers()
            self._start(None, [MASTER_CLASS, "--host", "127.0.0.1",
                               "--port", str(self.ports.spark_master),
                               "--webui-port", str(self.ports.spark_master_ui)])
        self._wait(lambda: self.master_state() is not None, "the Spark master", timeout, None)
        for n in SPARK_WORKER_IDS:
            if self.pid(n) is None:
                self.start_worker(n)
        self.wait_workers(len(SPARK_WORKER_IDS), timeout)

    def _clear_stopped_workers(self) -> None:
        """Empty the work and local directories of workers that are not running, before a
        new master: no application of theirs can be alive, and each left its executors'
        unpacked archives (about 450 MB each) and shuffle files behind (Spark's own worker
        cleanup waits days, ``spark.worker.cleanup.appDataTtl``)."""
        for n in SPARK_WORKER_IDS:
            if self.pid(n) is None:
                for d in (self.work_dir(n), self.local_dir(n)):
                    shutil.rmtree(d, ignore_errors=True)

    def start_worker(self, n: int) -> None:
        work = self.work_dir(n)
        self.local_dir(n).mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self._start(n, [WORKER_CLASS, "--host", "127.0.0.1",
                        "--port", str(self.ports.spark_worker(n)),
                        "--webui-port", str(self.ports.spark_worker_ui(n)),
                        "--cores", str(self.cores), "--memory", self.memory,
                        "--work-dir", str(work), self.master_url])

    def _start(self, worker: int | None, args: list[str]) -> None:
        d = self._dir(worker)
        d.mkdir(parents=True, exist_ok=True)
        ports = ({"Spark master": self.ports.spark_master,
                  "Spark master UI": self.ports.spark_master_ui} if worker is None else
                 {f"Spark worker {worker}": self.ports.spark_worker(worker),
                  f"Spark worker {worker} UI": self.ports.spark_worker_ui(worker)})
        for name, port in ports.items():
            if procs.port_in_use(port):
                raise SettingError(f"port {port} ({name}) is already in use; pick another "
                                   "base with KMON_PORT_BASE")
        props = self._properties(worker)
        # Earlier runs' applications are removed by up() (_clear_stopped_workers), not by
        # the worker's periodic cleanup; the master remembers few finished ones.
        props.write_text("spark.worker.cleanup.enabled false\n"
                         "spark.deploy.retainedApplications 20\n")
        cmd = [str(spark_home() / "bin" / "spark-class"), args[0],
               "--properties-file", str(props), *args[1:]]
        with open(self.log_path(worker), "a") as log:
            log.write(f"\n=== kmon {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}\n")
        pid = procs.spawn(cmd, self.log_path(worker), d, self.daemon_env(worker))
        (d / "pid").write_text(f"{pid}\n")

    def kill_worker(self, n: int) -> list[int]:
        """SIGKILL worker ``n`` with everything it started (its executors and their Python
        workers): a lost node. Returns the pids killed."""
        pid = self.pid(n)
        if pid is None:
            raise SettingError(f"Spark worker {n} is not running")
        pids = procs.session_members(pid)
        for p in pids:
            procs.signal_pid(p, signal.SIGKILL)
        for p in pids:
            procs.wait_dead(p, 30.0)
        (self._dir(n) / "pid").unlink(missing_ok=True)
        return pids

    def down(self, timeout: float = 20.0) -> None:
        for n in SPARK_WORKER_IDS:
            pid = self.pid(n)
            members = procs.session_members(pid) if pid is not None else []
            procs.terminate(self._dir(n) / "pid", pid, timeout)
            for p in members:  # executors that outlived their worker
                procs.signal_pid(p, signal.SIGKILL)
        procs.terminate(self._dir(None) / "pid", self.pid(), timeout)

    # --- the master's view ---------------------------------------------------------------

    def master_state(self) -> dict[str, Any] | None:
        """The master's JSON status (workers, applications), or None if it does not answer."""
        url = f"http://127.0.0.1:{self.ports.spark_master_ui}/json/"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return dict(json.load(r))
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self.master_state() or {}
        return sum(w.get("state") == "ALIVE" for w in state.get("workers", []))

    def wait_workers(self, count: int, timeout: float = 120.0) -> None:
        self._wait(lambda: self.alive_workers() >= count, f"{count} Spark workers alive",
                   timeout, SPARK_WORKER_IDS[0])

    def _wait(self, cond: Any, what: str, timeout: float, log_of: int | None) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise SettingError(f"no {what} after {timeout:.0f}s; end of "
                                   f"{self.log_path(log_of)}:\n"
                                   f"{procs.tail(self.log_path(log_of))}")
            time.sleep(0.5)
