"""Values name their writer; keys name their topic-partition, both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmon.probes import values as V

probes = st.integers(0, V.MAX_PROBE)
processes = st.integers(0, V.MAX_PROCESS)
seqs = st.integers(0, V.MAX_SEQ)


@given(probes, processes, seqs)
def test_value_round_trips_and_stays_direct(probe: int, process: int, seq: int) -> None:
    v = V.encode(probe, process, seq)
    assert 0 <= v < 2**62  # the checker keeps ints below 2**62 as their own code
    assert V.decode(v) == (probe, process, seq)


@given(st.tuples(probes, processes, seqs), st.tuples(probes, processes, seqs))
def test_values_are_unique(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    assert (V.encode(*a) == V.encode(*b)) == (a == b)


@pytest.mark.parametrize(("probe", "process", "seq", "name"), [
    (V.MAX_PROBE + 1, 0, 0, "probe"),
    (0, V.MAX_PROCESS + 1, 0, "process"),
    (0, 0, V.MAX_SEQ + 1, "seq"),
    (0, -1, 0, "process"),
    (0, 0, True, "seq"),
])
def test_out_of_range_parts_are_named(probe: int, process: int, seq: int, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        V.encode(probe, process, seq)


@pytest.mark.parametrize("bad", [-1, 2**62, "7", 1.0])
def test_decode_rejects_non_values(bad: object) -> None:
    with pytest.raises(ValueError):
        V.decode(bad)  # type: ignore[arg-type]


def test_probe_tag_is_stable_and_bounded() -> None:
    # Literal values: a tag must be the same in every process and every release (a restarted
    # probe, the monitor and `kmon investigate` all derive it), so no per-process hash.
    assert V.probe_tag("host.abc123") == 296
    assert V.probe_tag("x") == 643
    assert 0 <= V.probe_tag("x") <= V.MAX_PROBE


@given(st.text(min_size=1, max_size=40), st.integers(0, V.MAX_TOPICS - 1),
       st.integers(0, V.MAX_PARTITIONS - 1))
def test_keys_map_to_topic_partitions_and_back(prefix: str, n: int, partition: int) -> None:
    key = V.key_of(prefix, n, partition)
    assert 0 <= key < 2**63  # an Avro long
    assert V.topic_partition_of(prefix, key) == (V.topic_name(prefix, n), partition)
    assert V.topic_number(prefix, V.topic_name(prefix, n)) == n


def test_keys_of_one_prefix_are_distinct() -> None:
    keys = {V.key_of("p", n, part) for n in range(50) for part in range(20)}
    assert len(keys) == 1000


def test_key_of_another_prefix_is_rejected() -> None:
    key = V.key_of("a", 1, 2)
    with pytest.raises(ValueError, match="prefix"):
        V.topic_partition_of("b", key)


@pytest.mark.parametrize("topic", ["p.x", "p.01", "q.1", "p", "p.", "p.-1", "pp.1"])
def test_topic_number_ignores_other_topics(topic: str) -> None:
    assert V.topic_number("p", topic) is None


def test_topic_number_of_dotted_prefix() -> None:
    assert V.topic_number("kmon.probe", "kmon.probe.12") == 12
