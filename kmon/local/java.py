"""Finding a Java runtime for Kafka (and telling the user plainly when there is none)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from kmon.env import SettingError

# Kafka 4.x brokers need Java 17 or newer.
MIN_JAVA = 17


def find_java() -> Path:
    """``KMON_JAVA``, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    looked: list[str] = []
    if explicit := os.environ.get("KMON_JAVA"):
        if os.access(explicit, os.X_OK):
            return Path(explicit)
        looked.append(f"KMON_JAVA={explicit}")
    if home := os.environ.get("JAVA_HOME"):
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return candidate
        looked.append(f"JAVA_HOME={home}")
    if on_path := shutil.which("java"):
        return Path(on_path)
    looked.append("PATH")
    raise SettingError(
        f"Java not found (looked at {', '.join(looked)}): Kafka needs Java {MIN_JAVA}+; "
        "install it (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    )


def java_major_version(java: Path) -> int:
    out = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, check=False
    ).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise SettingError(f"cannot tell the version of Java at {java}: {out.strip()[:200]}")
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(match.group(2)) if major == 1 and match.group(2) else major


def check_java() -> Path:
    """The Java to use, checked to be new enough for Kafka 4.x."""
    java = find_java()
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise SettingError(f"Java at {java} is version {major}; Kafka 4.x needs {MIN_JAVA}+")
    return java
