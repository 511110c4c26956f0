"""Readable, deterministic YAML for generated files: multi-line strings as ``|`` blocks."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str)


def dump(data: Any) -> str:
    """``data`` as YAML: keys in insertion order, no line folding."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=1 << 16, allow_unicode=True)
