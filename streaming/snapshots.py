"""The driver's own checkpoint: metric values and which micro-batches they already count.

Spark checkpoints the queries (offsets, state); the driver keeps beside them, under
``<checkpoint>/metrics``, a JSON snapshot written after each micro-batch's outputs are flushed:
every counter and histogram, the last gauges, and per stage the id of the last micro-batch whose
effects they include. On restart the monitor restores the values, and a micro-batch Spark
replays (it ran before the crash but was not committed) is recognised by its id: its outputs
are already in Kafka and its counts already in the snapshot, so both are skipped. Counters
therefore continue across restarts and count each verdict once.

Snapshots are numbered files, never overwritten or renamed, so this works on object stores
(S3) as well as HDFS and local disks; the newest readable one wins and older ones are pruned.
Files go through Hadoop's FileSystem API of the running Spark, the same as the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^snapshot-([0-9]{12})\.json$")
KEEP = 4
VERSION = 1


class SnapshotStore:
    """Numbered JSON snapshots in a directory; subclasses say how files are reached."""

    def __init__(self) -> None:
        self.seq = 0

    def load(self) -> dict[str, Any] | None:
        """The newest readable snapshot (and continue numbering after it), or None."""
        names = sorted((n for n in self._list() if _NAME.match(n)), reverse=True)
        if names:
            self.seq = int(_NAME.match(names[0]).group(1))
        for name in names:
            try:
                data = json.loads(self._read(name))
            except (OSError, ValueError):
                continue  # a torn write: fall back to the one before
            if isinstance(data, dict) and data.get("version") == VERSION:
                return data
        return None

    def save(self, data: dict[str, Any]) -> None:
        self.seq += 1
        body = json.dumps({**data, "version": VERSION}, separators=(",", ":"))
        self._write(f"snapshot-{self.seq:012d}.json", body)
        names = sorted((n for n in self._list() if _NAME.match(n)), reverse=True)
        for old in names[KEEP:]:
            self._delete(old)

    # -- storage --------------------------------------------------------------------------
    def _list(self) -> list[str]:
        raise NotImplementedError

    def _read(self, name: str) -> str:
        raise NotImplementedError

    def _write(self, name: str, body: str) -> None:
        raise NotImplementedError

    def _delete(self, name: str) -> None:
        raise NotImplementedError


class LocalSnapshotStore(SnapshotStore):
    """Snapshots in a local directory (tests, tools)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.dir = Path(directory)

    def _list(self) -> list[str]:
        return [p.name for p in self.dir.iterdir()] if self.dir.is_dir() else []

    def _read(self, name: str) -> str:
        return (self.dir / name).read_text()

    def _write(self, name: str, body: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{name}.tmp"
        tmp.write_text(body)
        tmp.replace(self.dir / name)

    def _delete(self, name: str) -> None:
        (self.dir / name).unlink(missing_ok=True)


class HadoopDir:
    """Files of one directory under a Hadoop path (file:, hdfs:, s3a:, ...) through the
    driver's JVM: the snapshots' storage, and how the monitor reads Spark's checkpoint."""

    def __init__(self, spark: Any, directory: str) -> None:
        jvm = spark.sparkContext._jvm
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.dir = self._Path(directory)
        self.fs = self.dir.getFileSystem(conf)
        self._charset = jvm.java.nio.charset.StandardCharsets.UTF_8
        self._io = jvm.org.apache.commons.io.IOUtils

    def names(self) -> list[str]:
        """The directory's file names ([] if it does not exist)."""
        if not self.fs.exists(self.dir):
            return []
        return [s.getPath().getName() for s in self.fs.listStatus(self.dir)]

    def read(self, name: str) -> str:
        stream = self.fs.open(self._Path(self.dir, name))
        try:
            return self._io.toString(stream, self._charset)
        finally:
            stream.close()

    def write(self, name: str, body: str) -> None:
        self.fs.mkdirs(self.dir)
        stream = self.fs.create(self._Path(self.dir, name), False)
        try:
            stream.write(bytearray(body.encode()))
        finally:
            stream.close()

    def delete(self, name: str) -> None:
        self.fs.delete(self._Path(self.dir, name), False)


class HadoopSnapshotStore(SnapshotStore):
    """Snapshots in a ``HadoopDir``."""

    def __init__(self, spark: Any, directory: str) -> None:
        super().__init__()
        self.files = HadoopDir(spark, directory)

    def _list(self) -> list[str]:
        return self.files.names()

    def _read(self, name: str) -> str:
        return self.files.read(name)

    def _write(self, name: str, body: str) -> None:
        self.files.write(name, body)

    def _delete(self, name: str) -> None:
        self.files.delete(name)
