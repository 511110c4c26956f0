"""Set-up: fetch what the local stack needs into the cache, once.

- Kafka broker jars from Maven Central (``kafka-pom.xml``) into ``$KMON_CACHE/kafka-<v>/lib``,
  plus the list of Kafka's broker settings (``config-defs.tsv``) asked from those jars;
- the Spark Kafka connector matching the installed pyspark (``spark-kafka-pom.xml``) into
  ``$KMON_CACHE/spark-kafka-<v>/jars``, minus what pyspark already ships;
- S3A for ``s3a://`` checkpoints: hadoop-aws matching pyspark's bundled Hadoop and the AWS SDK
  bundle it pins (``hadoop-aws-pom.xml``) into ``$KMON_CACHE/hadoop-aws-<v>/jars``;
- Prometheus and promtool from Debian's package, if missing.

Each step is skipped when its output is complete for the same inputs, so a warm set-up makes
no network request and takes well under a second.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kmon.env import SettingError, kmon_cache
from kmon.local.java import check_java, find_java

HERE = Path(__file__).resolve().parent
KAFKA_POM = HERE / "kafka-pom.xml"
SPARK_KAFKA_POM = HERE / "spark-kafka-pom.xml"
HADOOP_AWS_POM = HERE / "hadoop-aws-pom.xml"
DUMP_CONFIG_SRC = HERE / "DumpKafkaConfig.java"
# Pinned so the resolution does not depend on whatever Maven's default plugin version is.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
COMPLETE = ".complete"

Log = Callable[[str], None]


def _pom_property(pom: Path, name: str) -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(pom).getroot().find(f"m:properties/m:{name}", ns)
    if node is None or not node.text:
        raise RuntimeError(f"{pom} has no <{name}> property")
    return node.text.strip()


KAFKA_VERSION = _pom_property(KAFKA_POM, "kafka.version")


def pyspark_version() -> str:
    return importlib.metadata.version("pyspark")


@dataclass(frozen=True)
class KafkaDist:
    """The cached Kafka broker: its classpath folder and its settings table."""

    root: Path

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def classpath(self) -> str:
        return str(self.lib / "*")

    @property
    def config_defs(self) -> Path:
        return self.root / "config-defs.tsv"


def kafka_dist(cache: Path | None = None) -> KafkaDist:
    return KafkaDist((cache or kmon_cache()) / f"kafka-{KAFKA_VERSION}")


def spark_kafka_dir(cache: Path | None = None, spark_version: str | None = None) -> Path:
    return (cache or kmon_cache()) / f"spark-kafka-{spark_version or pyspark_version()}" / "jars"


def installed_kafka(cache: Path | None = None) -> KafkaDist:
    """The cached Kafka, or a SettingError telling the user to run set-up."""
    dist = kafka_dist(cache)
    if not (dist.root / COMPLETE).is_file():
        raise SettingError(
            f"Kafka {KAFKA_VERSION} is not in the cache ({dist.root}): run `kmon setup`"
        )
    return dist


def spark_kafka_jars(cache: Path | None = None) -> list[Path]:
    """The cached connector jars for the installed pyspark, or a SettingError."""
    folder = spark_kafka_dir(cache)
    if not (folder.parent / COMPLETE).is_file():
        raise SettingError(
            f"the Spark Kafka connector is not in the cache ({folder}): run `kmon setup`"
        )
    return sorted(folder.glob("*.jar"))


def hadoop_version() -> str:
    """The Hadoop pyspark bundles, from its shaded client jar's name: hadoop-aws must match it
    exactly (S3A calls Hadoop internals that change between releases)."""
    for jar in _pyspark_jars().glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise SettingError(f"pyspark ships no hadoop-client-api jar in {_pyspark_jars()}")


def hadoop_aws_dir(cache: Path | None = None, version: str | None = None) -> Path:
    return (cache or kmon_cache()) / f"hadoop-aws-{version or hadoop_version()}" / "jars"


def hadoop_aws_jars(cache: Path | None = None) -> list[Path]:
    """The cached S3A jars for pyspark's Hadoop, or a SettingError."""
    folder = hadoop_aws_dir(cache)
    if not (folder.parent / COMPLETE).is_file():
        raise SettingError(f"S3A (hadoop-aws) is not in the cache ({folder}): run `kmon setup`")
    return sorted(folder.glob("*.jar"))


# --- the steps -------------------------------------------------------------------------------


def _fingerprint(*parts: str | Path) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.read_bytes() if isinstance(part, Path) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _is_complete(folder: Path, fingerprint: str) -> bool:
    marker = folder / COMPLETE
    return marker.is_file() and marker.read_text().strip() == fingerprint


@contextlib.contextmanager
def _staging(target: Path) -> Iterator[Path]:
    """A scratch folder beside ``target`` that replaces it atomically when the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _resolve(pom: Path, cache: Path, work: Path, props: dict[str, str]) -> list[tuple[str, Path]]:
    """Resolve ``pom``'s runtime classpath with Maven: ``(artifactId, jar path)`` pairs."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SettingError("Maven (mvn) not found: set-up fetches jars from Maven Central with it")
    shutil.copy(pom, work / "pom.xml")  # Maven writes beside the pom; keep the package clean
    listing = work / "deps.txt"
    cmd = [
        mvn, "-B", "-q", "-f", str(work / "pom.xml"),
        f"-Dmaven.repo.local={cache / 'm2'}",
        *(f"-D{k}={v}" for k, v in props.items()),
        f"{DEPENDENCY_PLUGIN}:list",
        "-DincludeScope=runtime",
        f"-DoutputFile={listing}",
        "-DoutputAbsoluteArtifactFilename=true",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SettingError(f"Maven could not resolve {pom.name} (network?):\n{tail}")
    jars = []
    for line in listing.read_text().splitlines():
        coords = line.strip().split(" -- ")[0]
        if not coords.endswith(".jar"):
            continue
        gav, path = coords.rsplit(":", 1)  # group:artifact:type[:classifier]:version:scope:path
        jars.append((gav.split(":")[1], Path(path)))
    if not jars:
        raise SettingError(f"Maven resolved no jars for {pom.name}")
    return jars


def fetch_kafka(cache: Path, log: Log = print) -> KafkaDist:
    dist = kafka_dist(cache)
    java = find_java()
    fingerprint = _fingerprint(KAFKA_POM, DUMP_CONFIG_SRC)
    if _is_complete(dist.root, fingerprint):
        log(f"kafka {KAFKA_VERSION}: cached at {dist.root}")
        return dist
    log(f"kafka {KAFKA_VERSION}: fetching jars from Maven Central into {dist.root}")
    with _staging(dist.root) as tmp:
        (tmp / "lib").mkdir()
        for _, jar in _resolve(KAFKA_POM, cache, tmp, {}):
            shutil.copy2(jar, tmp / "lib" / jar.name)
        defs = subprocess.run(
            [str(java), "-cp", str(tmp / "lib" / "*"), str(DUMP_CONFIG_SRC)],
            capture_output=True, text=True, check=False,
        )
        if defs.returncode != 0 or "\t" not in defs.stdout:
            raise SettingError(
                f"could not list Kafka's settings from its jars:\n{defs.stderr[-2000:]}"
            )
        (tmp / "config-defs.tsv").write_text(defs.stdout)
        for leftover in ("pom.xml", "deps.txt"):
            (tmp / leftover).unlink()
        (tmp / COMPLETE).write_text(fingerprint + "\n")
    return dist


def _pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SettingError("pyspark is not installed in this Python")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def _shipped(artifact: str, jar_names: list[str]) -> bool:
    # pyspark's jars are named <artifactId>-<version>.jar
    return any(re.match(re.escape(artifact) + r"-\d", name) for name in jar_names)


def _fetch_jars(pom: Path, folder: Path, props: dict[str, str], cache: Path) -> list[Path]:
    """Resolve ``pom`` with ``props`` into ``folder``, minus the jars pyspark ships; once."""
    fingerprint = _fingerprint(pom, *props.values())
    if _is_complete(folder.parent, fingerprint):
        return sorted(folder.glob("*.jar"))
    shipped = sorted(p.name for p in _pyspark_jars().glob("*.jar"))
    with _staging(folder.parent) as tmp:
        (tmp / "jars").mkdir()
        for artifact, jar in _resolve(pom, cache, tmp, props):
            if not _shipped(artifact, shipped):
                _link_or_copy(jar, tmp / "jars" / jar.name)
        for leftover in ("pom.xml", "deps.txt"):
            (tmp / leftover).unlink()
        (tmp / COMPLETE).write_text(fingerprint + "\n")
    return sorted(folder.glob("*.jar"))


def _link_or_copy(src: Path, dst: Path) -> None:
    # A hard link where Maven's repository shares the file system: the SDK bundle is ~700 MB.
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def fetch_spark_kafka(cache: Path, log: Log = print) -> list[Path]:
    version = pyspark_version()
    folder = spark_kafka_dir(cache, version)
    log(f"spark-sql-kafka {version}: {folder} (fetched from Maven Central when missing)")
    return _fetch_jars(SPARK_KAFKA_POM, folder, {"spark.version": version}, cache)


def fetch_hadoop_aws(cache: Path, log: Log = print) -> list[Path]:
    version = hadoop_version()
    folder = hadoop_aws_dir(cache, version)
    log(f"hadoop-aws {version} (s3a://): {folder} (fetched from Maven Central when missing; "
        "the AWS SDK bundle is about 700 MB)")
    return _fetch_jars(HADOOP_AWS_POM, folder, {"hadoop.version": version}, cache)


# Debian's packages and the commands each must put on PATH: Prometheus with promtool, and
# Alertmanager (the local stack's and the live alerting tests' pager path).
PROMETHEUS_PACKAGES = {"prometheus": ("prometheus", "promtool"),
                       "prometheus-alertmanager": ("prometheus-alertmanager", "amtool")}


def _missing_packages() -> list[str]:
    return [pkg for pkg, cmds in PROMETHEUS_PACKAGES.items()
            if not all(shutil.which(c) for c in cmds)]


def ensure_prometheus(log: Log = print) -> Path:
    """Prometheus, promtool and Alertmanager on PATH, installing Debian's packages if missing."""
    missing = _missing_packages()
    if not missing:
        found = Path(shutil.which("prometheus") or "")
        log(f"prometheus: {found}; alertmanager: {shutil.which('prometheus-alertmanager')}")
        return found
    if shutil.which("apt-get") is None:
        raise SettingError(f"{', '.join(missing)} not found and there is no apt-get: install "
                           "them")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise SettingError(f"{', '.join(missing)} not found: run `apt-get install -y "
                               f"{' '.join(missing)}` as root")
        prefix = ["sudo", "-n"]
    log(f"prometheus: installing Debian's packages (apt-get install {' '.join(missing)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [
        *prefix, "apt-get", "install", "-y", "-q",
        "--no-install-recommends",  # recommends pull in node-exporter and more services
        "-o", "DPkg::Lock::Timeout=300",  # another engineer's apt may hold the lock
        *missing,
    ]
    proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:  # stale package lists on a fresh machine: refresh once, retry
        update = [*prefix, "apt-get", "update", "-q"]
        subprocess.run(update, env=env, capture_output=True, check=False)
        proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or _missing_packages():
        raise SettingError(f"could not install {' '.join(missing)} with apt-get:\n"
                           f"{proc.stderr[-2000:]}")
    return Path(shutil.which("prometheus") or "")


@contextlib.contextmanager
def _cache_lock(cache: Path) -> Iterator[None]:
    """Several checkouts may share one cache; let one set-up fill it at a time."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".setup.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def setup(cache: Path | None = None, prometheus: bool = True, log: Log = print) -> None:
    """Everything the local stack needs, fetched once; quick and offline when warm."""
    cache = cache or kmon_cache()
    java = check_java()
    log(f"java: {java}")
    with _cache_lock(cache):
        fetch_kafka(cache, log)
        fetch_spark_kafka(cache, log)
        fetch_hadoop_aws(cache, log)
    if prometheus:
        ensure_prometheus(log)
    log(f"python: {sys.executable}")
