"""`kmon pack`'s choices, checked without building (the cluster test builds and uses it)."""

from __future__ import annotations

from kmon import env
from kmon.pack import PROVIDED_BY_SPARK, _name, digest, installed_pins, runtime_requirements


def test_the_archive_holds_kmons_runtime_requirements_but_not_spark() -> None:
    names = {_name(r) for r in runtime_requirements()}
    assert {"pandas", "pyarrow", "confluent-kafka", "librt"} <= names
    assert not names & PROVIDED_BY_SPARK
    assert not names & {"pytest", "hypothesis", "moto"}  # the test extra stays out


def test_every_package_is_pinned_to_the_drivers_version() -> None:
    pins = installed_pins()
    assert all("==" in p for p in pins)
    assert "pyarrow" in {_name(p) for p in pins}
    assert not {_name(p) for p in pins} & {"kmon", *PROVIDED_BY_SPARK}


def test_the_cache_key_follows_sources_and_pins() -> None:
    root = env.repo_root()
    assert root is not None
    key = digest(root, ["a==1"], ["a"])
    assert key == digest(root, ["a==1"], ["a"])
    assert key != digest(root, ["a==2"], ["a"])
