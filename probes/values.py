"""Values and keys: every number a probe writes says who wrote it and where it lives.

**Values** are unique non-negative ints below 2**62 (the checker keeps such ints as their own
64-bit code, no hashing), laid out as::

    bit 61 ........ 52 51 ................ 28 27 ................. 0
        probe (10 bits) | process (24 bits)   | sequence (28 bits)

``probe`` is a 10-bit tag of the probe run's id, ``process`` the logical process that sent it
and ``sequence`` that process's count of values. A process that would run out of sequence
numbers is crashed and comes back under a fresh process id (``Workload`` does it), so within
one probe run a value is never written twice; runs never share a key (each starts on fresh
topics), so values are unique per key across runs too.

**Keys** are ints mapped one-to-one to topic-partitions of the probe's topics, named
``<prefix>.<n>`` (``n`` counts up from 0, never reused while the topics exist)::

    key = crc32(prefix) << 31  |  n << 10  |  partition

so keys of probes with different prefixes differ, a key never changes its partition, and the
topic-partition is computable from the key alone (given the prefix). ``KeyPlacement`` in each
op's meta records the mapping too, for readers that have neither.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

PROBE_BITS = 10
PROCESS_BITS = 24
SEQ_BITS = 28
MAX_PROBE = (1 << PROBE_BITS) - 1
MAX_PROCESS = (1 << PROCESS_BITS) - 1
MAX_SEQ = (1 << SEQ_BITS) - 1
VALUE_LIMIT = 1 << (PROBE_BITS + PROCESS_BITS + SEQ_BITS)  # == 2**62

PARTITION_BITS = 10
TOPIC_BITS = 21
MAX_PARTITIONS = 1 << PARTITION_BITS  # partitions per probe topic
MAX_TOPICS = 1 << TOPIC_BITS  # topics per prefix


class Decoded(NamedTuple):
    probe: int
    process: int
    seq: int


def probe_tag(probe_id: str) -> int:
    """The 10-bit tag a probe run's values carry (a hash of its id)."""
    return zlib.crc32(probe_id.encode()) & MAX_PROBE


def encode(probe: int, process: int, seq: int) -> int:
    """The value ``seq`` of ``process`` of probe tag ``probe``; ValueError when out of range."""
    for name, x, top in (("probe", probe, MAX_PROBE), ("process", process, MAX_PROCESS),
                         ("seq", seq, MAX_SEQ)):
        if type(x) is not int or not 0 <= x <= top:
            raise ValueError(f"{name} must be an int in 0..{top}, got {x!r}")
    return (probe << (PROCESS_BITS + SEQ_BITS)) | (process << SEQ_BITS) | seq


def decode(value: int) -> Decoded:
    """(probe tag, process, sequence) of a value ``encode`` made."""
    if type(value) is not int or not 0 <= value < VALUE_LIMIT:
        raise ValueError(f"not a probe value: {value!r}")
    return Decoded(
        value >> (PROCESS_BITS + SEQ_BITS),
        (value >> SEQ_BITS) & MAX_PROCESS,
        value & MAX_SEQ,
    )


# ---------------------------------------------------------------------------------------------
# Keys


def prefix_tag(prefix: str) -> int:
    return zlib.crc32(prefix.encode())


def topic_name(prefix: str, n: int) -> str:
    return f"{prefix}.{n}"


def topic_number(prefix: str, topic: str) -> int | None:
    """``n`` of a topic named ``<prefix>.<n>``, or None for any other topic."""
    head, dot, tail = topic.rpartition(".")
    if head != prefix or not dot or not tail.isdigit() or (tail != "0" and tail[0] == "0"):
        return None
    n = int(tail)
    return n if n < MAX_TOPICS else None


def key_of(prefix: str, n: int, partition: int) -> int:
    """The key of partition ``partition`` of topic ``<prefix>.<n>``."""
    if not 0 <= n < MAX_TOPICS:
        raise ValueError(f"topic number must be in 0..{MAX_TOPICS - 1}, got {n}")
    if not 0 <= partition < MAX_PARTITIONS:
        raise ValueError(f"partition must be in 0..{MAX_PARTITIONS - 1}, got {partition}")
    return (prefix_tag(prefix) << (TOPIC_BITS + PARTITION_BITS)) | (n << PARTITION_BITS) | partition


def topic_partition_of(prefix: str, key: int) -> tuple[str, int]:
    """The (topic, partition) ``key`` stands for; ValueError for a key of another prefix."""
    if key >> (TOPIC_BITS + PARTITION_BITS) != prefix_tag(prefix):
        raise ValueError(f"key {key} does not belong to prefix {prefix!r}")
    n = (key >> PARTITION_BITS) & (MAX_TOPICS - 1)
    return topic_name(prefix, n), key & (MAX_PARTITIONS - 1)
