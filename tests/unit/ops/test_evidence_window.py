"""kmon evidence without Kafka: durations, times, windows, filters, rows, bad flags."""

from __future__ import annotations

from typing import Any

import pytest

from kmon.cli import main
from kmon.investigate import parse_evidence
from kmon.investigate.evidence import wall_times
from kmon.investigate.listing import Filters, Row, summarize, table_line
from kmon.investigate.timewindow import (
    TimeWindow,
    WindowError,
    WindowFlags,
    around_times,
    format_time,
    parse_duration,
    parse_time,
    resolve_window,
)

NOW = 1_764_140_400.0  # 2025-11-26T07:00:00Z


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("1h", 3600.0), ("7d", 604800.0),
    ("1.5h", 5400.0), ("2w", 1209600.0), (" 10M ", 600.0),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-5m", "0", "5 minutes", "1h30m", "5y"])
def test_bad_durations_name_the_flag(text: str) -> None:
    with pytest.raises(WindowError, match="--since"):
        parse_duration(text, "--since")


@pytest.mark.parametrize(("text", "seconds"), [
    ("1764140400", NOW), ("1764140400.5", NOW + 0.5),
    ("2025-11-26T07:00:00Z", NOW), ("2025-11-26T07:00:00", NOW),
    ("2025-11-26T08:00:00+01:00", NOW), ("2025-11-26 07:00:00.250Z", NOW + 0.25),
])
def test_times(text: str, seconds: float) -> None:
    assert parse_time(text) == seconds


def test_bad_time_names_the_flag() -> None:
    with pytest.raises(WindowError, match="--at 'yesterday' is neither unix seconds nor"):
        parse_time("yesterday", "--at")


def test_format_time_is_utc_iso() -> None:
    assert format_time(NOW) == "2025-11-26T07:00:00Z"


@pytest.mark.parametrize(("flags", "window"), [
    (WindowFlags(), TimeWindow(NOW - 3600, NOW)),
    (WindowFlags(since="2d"), TimeWindow(NOW - 172800, NOW)),
    (WindowFlags(at="1764140400"), TimeWindow(NOW - 900, NOW + 900)),
    (WindowFlags(at="2025-11-26T07:00:00Z", window="1m"), TimeWindow(NOW - 60, NOW + 60)),
    (WindowFlags(from_="1764130000"), TimeWindow(1764130000, NOW)),
    (WindowFlags(from_="1764130000", to="1764135000"), TimeWindow(1764130000, 1764135000)),
])
def test_windows(flags: WindowFlags, window: TimeWindow) -> None:
    assert resolve_window(flags, now=NOW) == window


@pytest.mark.parametrize(("flags", "message"), [
    (WindowFlags(since="1h", at="1"), "--since and --at exclude each other"),
    (WindowFlags(at="1", from_="1"), "--at and --from exclude each other"),
    (WindowFlags(window="5m"), "--window goes with --at"),
    (WindowFlags(since="1h", window="5m"), "--window goes with --at"),
    (WindowFlags(to="5"), "--to goes with --from"),
    (WindowFlags(from_="10", to="5"), "--to 5 is before --from 10"),
    (WindowFlags(at="1", window="0"), "--window '0' must be more than zero"),
])
def test_bad_window_combinations(flags: WindowFlags, message: str) -> None:
    with pytest.raises(WindowError, match=message):
        resolve_window(flags, now=NOW)


def test_window_bounds_are_closed_in_milliseconds() -> None:
    w = TimeWindow(10.0, 20.0)
    assert w.contains_ms(10_000) and w.contains_ms(20_000)
    assert not w.contains_ms(9_999) and not w.contains_ms(20_001)


def record(**fields: Any) -> dict[str, Any]:
    base = {"id": "a" * 32, "anomaly": "lost-write", "probe": "probe-0", "key": 0,
            "topic": "kmon-probe", "partition": 3, "offsets": [59], "values": [7],
            "ops": [{"index": 403, "process": 2, "time": None}], "update": False}
    return {**base, **fields}


@pytest.mark.parametrize(("filters", "kept"), [
    (Filters(), True),
    (Filters(anomaly="lost-write", topic="kmon-probe", partition=3), True),
    (Filters(anomaly="duplicate"), False),
    (Filters(topic="other"), False),
    (Filters(partition=4), False),
    (Filters(cluster="prod", broker=2), True),  # no cluster/broker fields: unknown, kept
])
def test_filters_on_a_record_without_cluster_and_broker(filters: Filters, kept: bool) -> None:
    assert filters.keep(record()) is kept


@pytest.mark.parametrize(("filters", "kept"), [
    (Filters(cluster="prod"), True),
    (Filters(cluster="staging"), False),
    (Filters(broker=2), True),
    (Filters(broker=1), False),
    (Filters(broker="unknown"), False),
])
def test_filters_on_cluster_and_broker(filters: Filters, kept: bool) -> None:
    assert filters.keep(record(cluster="prod", broker=2)) is kept


def test_broker_unknown_keeps_only_records_without_a_leader() -> None:
    unknown = Filters(broker="unknown")
    assert unknown.keep(record(broker=None)) and unknown.keep(record())
    assert Filters(broker=2).keep(record(broker=None))  # null: unknown, passes


def test_rows_and_table_lines() -> None:
    row = Row.of(record(cluster="prod", broker=2, detected_at=int(NOW * 1e9)), 0)
    assert row.emitted == NOW  # detected_at wins over the Kafka timestamp
    line = table_line(row)
    assert line.split() == ["a" * 32, "2025-11-26T07:00:00Z", "lost-write", "prod",
                            "kmon-probe/3", "2", "probe-0", "offsets", "59", "values", "7",
                            "ops", "403"]
    bare = Row.of({"id": "x", "anomaly": "unseen"}, 1_764_140_400_000)
    assert bare.emitted == NOW
    assert table_line(bare).split()[3:6] == ["?", "?/?", "?"]


def test_summary_is_short() -> None:
    long = summarize(record(offsets=list(range(100)), values=list(range(10**12, 10**12 + 50))))
    assert len(long) <= 48 and long.endswith("...")
    assert summarize(record(offsets=[1, 2, 3, 4])).startswith("offsets 1,2,3,+1 ")
    assert summarize({}) == "-"


def test_wall_times_of_a_record_and_the_ops_window() -> None:
    ns = int(NOW * 1e9)
    ev = parse_evidence(record(ops=[{"index": 1, "time": ns - 60 * 10**9}, {"index": 2}],
                               decided_time=ns))
    assert wall_times(ev) == [NOW - 60, NOW]
    assert around_times(wall_times(ev), 300) == TimeWindow(NOW - 360, NOW + 300)
    unseen = parse_evidence(record(anomaly="unseen", ops=[], record={"ack-time": ns}))
    assert wall_times(unseen) == [NOW]
    synthetic = parse_evidence(record(ops=[{"index": 1, "time": 4030}]))
    assert wall_times(synthetic) == [] and around_times([], 300) is None


def test_the_ops_window_reaches_the_records_emission() -> None:
    """Op events a probe produced late (buffered while the events topic was away) carry Kafka
    timestamps after their ops: the window runs to when the monitor emitted the verdict, by
    which time it had read them all."""
    from kmon.cli.investigate import _ops_window

    ns = int(NOW * 1e9)
    ev = parse_evidence(record(ops=[{"index": 1, "time": ns - 600 * 10**9}],
                               decided_time=ns - 590 * 10**9))
    assert _ops_window(ev, NOW, None, 60) == TimeWindow(NOW - 660, NOW + 60)
    assert _ops_window(ev, None, None, 60) == TimeWindow(NOW - 660, NOW - 530)
    nameless = parse_evidence(record(ops=[{"index": 1, "time": 4030}]))
    assert _ops_window(nameless, NOW, None, 60) == TimeWindow(NOW - 60, NOW + 60)
    assert _ops_window(nameless, None, None, 60) is None


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "soon"], "--since 'soon' is not a duration"),
    (["--at", "noon"], "--at 'noon' is neither unix seconds nor an ISO-8601 time"),
    (["--since", "1h", "--from", "1"], "--since and --from exclude each other"),
    (["--window", "5m"], "--window goes with --at"),
    (["--anomaly", "lost-writes"], "--anomaly 'lost-writes' is not one of"),
    (["--cluster", "bad/name"], "--cluster 'bad/name' is not a cluster name"),
    (["--broker", "leader"], "--broker 'leader' is neither a broker id nor 'unknown'"),
    (["--partition", "-1"], "--partition -1 is negative"),
    (["--limit", "0"], "--limit 0 must be at least 1"),
    (["-X", "nokey"], "-X 'nokey' is not KEY=VALUE"),
])
def test_bad_flags_exit_2(args: list[str], message: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evidence", "--bootstrap", "localhost:1", *args]) == 2
    assert f"kmon: error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("anomaly", ["share-lost", "share-double-accept", "share-redelivered",
                                     "share-concurrent-delivery", "share-delivery-count"])
def test_share_group_types_are_anomaly_filters(anomaly: str) -> None:
    import argparse

    from kmon.cli.evidence import _filters

    args = argparse.Namespace(anomaly=anomaly, cluster=None, topic=None, partition=None,
                              limit=None, broker=None)
    assert _filters(args).anomaly == anomaly


def test_no_bootstrap_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KMON_EVENTS_BOOTSTRAP", raising=False)
    monkeypatch.delenv("KMON_BOOTSTRAP", raising=False)
    assert main(["evidence"]) == 2
    assert "kmon: error: no bootstrap servers" in capsys.readouterr().err


def test_investigate_rejects_a_bad_at_and_margin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["investigate", "an-1", "--bootstrap", "localhost:1", "--at", "x"]) == 2
    assert "kmon: error: --at 'x'" in capsys.readouterr().err
    assert main(["investigate", "an-1", "--bootstrap", "localhost:1", "--margin", "0"]) == 2
    assert "kmon: error: --margin '0' must be more than zero" in capsys.readouterr().err
