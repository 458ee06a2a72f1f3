"""A stream's event-time watermark: observed by the write tasks, folded on the driver, recorded by the committer
with the data, recovered from the ledger or the table, carried through maintenance (driven without Spark; the
Spark stream is in tests/test_watermark_stream.py)."""

from __future__ import annotations

import datetime
import json
import random
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import icesink
from icesink.catalog import database
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import engine
from icesink.catalog.ledger import Ledger, checkpoints
from icesink.catalog.loader import open_catalog
from icesink.completeness.durations import DurationError, duration_micros
from icesink.completeness.watermark import WatermarkState, format_watermark, parse_watermark
from icesink.errors import BadRowError
from icesink.maintenance.committing import MaintenanceTarget
from icesink.maintenance.compact import compact, plan_compaction
from icesink.maintenance.policy import MaintenancePolicy
from icesink.paths import file_uri
from icesink.results import SplitTimes, WriteResult, decode_write_result, encode_write_result
from icesink.sink.event_time import EventTimeSettings
from icesink.sink.stream_watermark import StreamWatermark, TableTimes
from icesink.writer.event_times import EventTimes
from icesink.writer.spec import EventTimeSpec
from tests.helpers.event_streams import MINUTE, TABLE, Stream, at, micros, summaries
from tests.helpers.support import create_orders_table

# --- durations and values -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15 minutes", 15 * MINUTE),
        ("15 Minutes", 15 * MINUTE),
        ("15min", 15 * MINUTE),
        ("1 minute", MINUTE),
        ("90s", 90_000_000),
        ("90 seconds", 90_000_000),
        ("250ms", 250_000),
        ("1.5 hours", 90 * MINUTE),
        ("2 days", 2 * 24 * 60 * MINUTE),
        ("0", 0),
        (datetime.timedelta(minutes=3, microseconds=7), 3 * MINUTE + 7),
    ],
)
def test_durations_in_several_spellings(text: Any, expected: int) -> None:
    assert duration_micros(text) == expected


@pytest.mark.parametrize("text", ["15", "fifteen minutes", "-5 minutes", "5 fortnights", "", None, 15, [1]])
def test_what_is_not_a_duration_is_refused_saying_what_is(text: Any) -> None:
    with pytest.raises(DurationError, match="not a duration"):
        duration_micros(text)
    with pytest.raises(DurationError, match="negative"):
        duration_micros(datetime.timedelta(seconds=-1))


def test_the_summary_value_is_iso_8601_with_microseconds_and_zone() -> None:
    value = format_watermark(micros(61) + 5)
    assert value == "2026-11-25T01:01:00.000005+00:00"
    assert parse_watermark(value) == micros(61) + 5
    assert parse_watermark("2026-11-25T02:01:00.000005+01:00") == micros(61) + 5  # another zone, the same moment
    with pytest.raises(ValueError, match="no zone"):
        parse_watermark("2026-11-25T01:01:00")


# --- what a task observes -------------------------------------------------------------------------------------------


def test_a_task_observes_each_splits_latest_time_its_late_rows_and_rows_without_a_time() -> None:
    times = EventTimes(EventTimeSpec("t", ("topic", "partition"), late_before=micros(10)), TABLE)
    ts = pa.timestamp("us", tz="UTC")
    times.observe(
        pa.table(
            {
                "t": pa.array([at(5), at(20), None, at(30), at(1)], ts),
                "topic": ["orders ü", "orders ü", "orders ü", None, "orders ü"],
                "partition": pa.array([0, 0, 0, 1, None], pa.int32()),
            }
        )
    )
    times.observe(
        pa.table(
            {"t": pa.array([at(40)], ts), "topic": ["orders ü"], "partition": pa.array([0], pa.int32())}
        ).to_batches()[0]
    )
    found = {t.split: t for t in times.results()}
    assert found == {
        '["orders ü",0]': SplitTimes('["orders ü",0]', micros(40), 4, late_rows=1, untimed_rows=1),
        "[null,1]": SplitTimes("[null,1]", micros(30), 1),
        '["orders ü",null]': SplitTimes('["orders ü",null]', micros(1), 1, late_rows=1),
    }


@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["k0", "k1", "ü 2", None]), st.sampled_from([0, 1, 7]), st.integers(0, 50) | st.none()
            ),
            min_size=1,
            max_size=30,
        ),
        min_size=1,
        max_size=6,
    ),
    sorted_runs=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_batches_of_one_split_and_of_several_observe_the_same_as_a_plain_count(
    batches: list[list[tuple[str | None, int, int | None]]], sorted_runs: bool
) -> None:
    """Batches whose rows are all one split's (as Spark's Kafka source gives them) skip the grouping; the splits'
    latest times, rows, late rows and rows without a time are what counting them one by one says."""
    spec = EventTimeSpec("t", ("topic", "partition"), late_before=20)
    times = EventTimes(spec, "t")
    expected: dict[str, list[int | None]] = {}
    for rows in batches:
        if sorted_runs:  # one split per batch, as Kafka's tasks read
            rows = [(rows[0][0], rows[0][1], t) for _, _, t in rows]
        times.observe(
            pa.table(
                {
                    "topic": pa.array([r[0] for r in rows], pa.string()),
                    "partition": pa.array([r[1] for r in rows], pa.int32()),
                    "t": pa.array([r[2] for r in rows], pa.int64()).cast(pa.timestamp("us", "UTC")),
                }
            )
        )
        for topic, partition, t in rows:
            name = json.dumps([topic, partition], ensure_ascii=False, separators=(",", ":"))
            latest, count, late, untimed = expected.get(name, [None, 0, 0, 0])
            if t is not None:
                latest = t if latest is None else max(latest, t)
            expected[name] = [latest, count + 1, late + (t is not None and t < 20), untimed + (t is None)]
    observed = {s.split: [s.latest, s.rows, s.late_rows, s.untimed_rows] for s in times.results()}
    assert observed == expected


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (pa.array([datetime.datetime(2026, 11, 25, 0, 30)], pa.timestamp("us")), 30 * MINUTE),  # no zone: UTC
        (pa.array([datetime.date(2026, 11, 26)], pa.date32()), 24 * 60 * MINUTE),
        (pa.array([1_795_566_600_000_000_123], pa.timestamp("ns", tz="Europe/Berlin")), None),
    ],
)
def test_event_times_of_every_timestamp_kind_and_dates(array: pa.Array, expected: int | None) -> None:
    times = EventTimes(EventTimeSpec("t"), TABLE)
    times.observe(pa.table({"t": array}))
    (found,) = times.results()
    assert found.split == "[]" and found.rows == 1
    if expected is not None:
        assert found.latest == micros(0) + expected
    else:  # nanoseconds truncate to the microsecond
        assert found.latest == 1_795_566_600_000_000


def test_an_event_time_that_is_not_a_time_is_refused_naming_table_and_column() -> None:
    times = EventTimes(EventTimeSpec("ordered_at"), TABLE)
    with pytest.raises(BadRowError, match=r"table shop.events ü: event_time column 'ordered_at' holds string"):
        times.observe(pa.table({"ordered_at": ["2026-11-25"]}))


def test_write_results_carry_event_times_and_older_ones_decode_without() -> None:
    result = WriteResult(3, 1, 0, event_times=(SplitTimes('["a",0]', 17, 2, 1, 0), SplitTimes("[]", None, 1, 0, 1)))
    assert decode_write_result(encode_write_result(result)) == result
    plain = WriteResult(3, 1, 0)
    assert b"event_times" not in encode_write_result(plain)  # a stream without event_time encodes as before
    assert decode_write_result(encode_write_result(plain)) == plain


# --- the fold --------------------------------------------------------------------------------------------------------


def test_the_lowest_active_split_decides_an_idle_one_stops_holding_back_and_a_new_one_starts_at_the_watermark() -> None:
    idle_ms = 60_000
    state = WatermarkState().fold({"a": micros(10), "b": micros(30)}, now_ms=0, idle_ms=idle_ms)
    assert state.watermark == micros(10)
    state = state.fold({"b": micros(40)}, now_ms=30_000, idle_ms=idle_ms)
    assert state.watermark == micros(10)  # a is quiet, not yet idle
    state = state.fold({"b": micros(50)}, now_ms=61_000, idle_ms=idle_ms)
    assert state.watermark == micros(50)  # a is idle
    state = state.fold({"a": micros(20), "c": micros(5)}, now_ms=62_000, idle_ms=idle_ms)
    assert state.watermark == micros(50)  # back from idleness and new: both start at the watermark
    assert state.splits["a"].mark == micros(50) and state.splits["c"].mark == micros(50)
    assert WatermarkState.decode_splits(state.encode_splits()) == state.splits
    everything_idle = state.fold({}, now_ms=10_000_000, idle_ms=idle_ms)
    assert everything_idle.watermark == micros(50)


# --- driven through tasks, the driver's fold and the committer -------------------------------------------------------


def test_the_watermark_is_committed_with_the_data_and_read_back_by_pyiceberg(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config, TABLE)
    stream = Stream(catalog_config, lateness=10 * MINUTE)
    stream.batch([(1, "a", 0), (2, "b", 30)])
    stream.batch([(3, "a", 60), (4, "b", -15), (5, "b", None)])  # 4 is late: below 23:50 the day before
    first, second = summaries(catalog_config)
    assert first["icesink.watermark"] == "2026-11-24T23:50:00.000000+00:00"
    assert (second["icesink.watermark"], second["icesink.late-rows"]) == ("2026-11-25T00:20:00.000000+00:00", "1")
    assert second["icesink.rows-without-event-time"] == "1"
    assert icesink.watermark(TABLE, catalog=catalog_config) == at(20)
    # pyiceberg's own view of the table: the summary and the split state in the same metadata.
    table = open_catalog(catalog_config).load_table(TABLE)
    record = json.loads(table.properties["icesink.watermark-splits.job"])
    splits = record["splits"]
    assert set(splits) == {'["a"]', '["b"]'} and splits['["a"]'][0] == micros(50)
    assert record["watermark"] == "2026-11-25T00:20:00.000000+00:00"
    assert "icesink.watermark.splits" not in table.current_snapshot().summary.additional_properties


def test_a_restart_goes_on_from_the_ledger_and_else_from_the_table(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config, TABLE)
    stream = Stream(catalog_config)
    stream.batch([(1, "a", 10), (2, "b", 40)])
    stream.restart()
    stream.batch([(3, "b", 50)])  # a is not idle: the watermark stays at a's 00:10
    assert summaries(catalog_config)[-1]["icesink.watermark"] == format_watermark(micros(10))
    with engine(catalog_config).begin() as connection:  # the ledger forgets: pruned, or a new catalog database
        connection.execute(sa.delete(checkpoints).where(checkpoints.c.catalog_name == catalog_config.name))
    stream.restart()
    stream.batch([(4, "a", 30)])  # recovered from the table: a and b as before, so a's 00:30 is the new low
    assert summaries(catalog_config)[-1]["icesink.watermark"] == format_watermark(micros(30))


def test_the_committer_never_records_a_lower_watermark_and_maintenance_carries_it(
    catalog_config: CatalogConfig,
) -> None:
    create_orders_table(catalog_config, TABLE)
    Stream(catalog_config, job="fast").batch([(1, "a", 100)])
    slow = Stream(catalog_config, job="slow")
    slow.batch([(2, "a", 10)])  # another job's lower watermark: the table's stays
    assert summaries(catalog_config)[-1]["icesink.watermark"] == format_watermark(micros(100))
    # Another tool commits: its snapshot holds no watermark, the table's is still found.
    table = open_catalog(catalog_config).load_table(TABLE)
    table.append(pa.table({"id": [9], "name": ["x"], "amount": [1.0], "ts": [None]}, schema=table.schema().as_arrow()))
    assert "icesink.watermark" not in summaries(catalog_config)[-1]
    assert icesink.watermark(TABLE, catalog=catalog_config) == at(100)
    table = open_catalog(catalog_config).load_table(TABLE)
    target = MaintenanceTarget(open_catalog(catalog_config), catalog_config, TABLE)
    plan = plan_compaction(table, MaintenancePolicy(min_input_files=2), everything=True)
    compact(target, table, plan)
    last = summaries(catalog_config)[-1]
    assert last["icesink.maintenance"] == "compact" and last["icesink.watermark"] == format_watermark(micros(100))


# --- the property: randomised histories -----------------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_random_histories_never_lower_the_watermark_and_count_late_rows_exactly(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    """Event times out of order by at most the lateness, over three splits (one falls idle for a while), restarts
    at random micro-batches, maintenance and another tool's commits in between, into a table partitioned by
    hour: the recorded watermark never decreases; a row is late exactly when it is below the watermark its
    micro-batch started with (a model says which); a row of a split that was never idle and is within the
    lateness of its split's latest time is never late; every hour with rows whose end the watermark passed is
    marked done in the commit that passes it, none before, and no on-time row ever lands in a done hour."""
    rng = random.Random(seed)
    warehouse = tmp_path_factory.mktemp("history")
    config = CatalogConfig("history", f"sqlite:///{warehouse / 'catalog.db'}", file_uri(warehouse))
    database.upgrade(config)
    create_orders_table(config, TABLE, partition_by=("hour(ts)",))
    lateness = 10 * MINUTE
    stream = Stream(config, lateness=lateness, idle_ms=60_000)
    written_hours: set[int] = set()  # hours since START with rows
    done_hours: set[int] = set()
    model = WatermarkState()
    latest = {"a": 0.0, "b": 0.0, "c": 0.0}
    idle_until = rng.randrange(2, 6)
    ever_idle: set[str] = set()  # splits that were idle at some micro-batch's start
    from_the_start: set[str] = set()  # the splits of the first micro-batch
    next_id = 0
    for batch in range(10):
        stream.clock_ms += 20_000
        rows = []
        before = dict(latest)
        for split in latest:
            if split == "c" and 1 <= batch < idle_until:
                continue  # c falls silent for a while
            for _ in range(rng.randrange(0, 4)):
                latest[split] += rng.uniform(0, 15)
                minute = latest[split] - rng.uniform(0, 10)  # out of order by at most the lateness
                rows.append((next_id, split, round(minute, 3)))
                next_id += 1
        if not rows:
            continue
        start = model.watermark
        expected_late = sum(1 for r in rows if start is not None and micros(r[2]) < start)
        ever_idle.update(s for s, mark in model.splits.items() if stream.clock_ms - mark.seen_ms > 60_000)
        for _, split, minute in rows:
            steady = f'["{split}"]' in from_the_start and f'["{split}"]' not in ever_idle
            if steady and minute >= before[split] - 10 and start is not None:
                assert micros(minute) >= start, (seed, batch, split)  # on time in a split never idle: never late
        observed: dict[str, int] = {}
        for _, split, minute in rows:
            mark = micros(minute) - lateness
            observed[f'["{split}"]'] = max(mark, observed.get(f'["{split}"]', mark))
        model = model.fold(observed, stream.clock_ms, 60_000)
        from_the_start = from_the_start or set(observed)  # a split new later starts at the watermark
        properties = stream.batch(rows)
        assert int(properties["icesink.late-rows"]) == expected_late, (seed, batch)
        assert properties["icesink.watermark"] == format_watermark(model.watermark)  # type: ignore[arg-type]
        hours = {int(minute // 60) for _, _, minute in rows}
        on_time = {int(minute // 60) for _, _, minute in rows if start is None or micros(minute) >= start}
        assert not on_time & done_hours, (seed, batch)  # an on-time row never lands in a done hour
        written_hours |= hours
        reached = {h for h in written_hours if micros((h + 1) * 60) <= model.watermark}  # type: ignore[operator]
        made_done = json.loads(summaries(config)[-1].get("icesink.partitions-done", "[]"))
        assert made_done == sorted(f"ts_hour={at(h * 60):%Y-%m-%d-%H}" for h in reached - done_hours), (seed, batch)
        done_hours |= reached
        if rng.random() < 0.3:
            stream.restart()
        if rng.random() < 0.15:  # maintenance between commits: its snapshot carries the watermark
            table = open_catalog(config).load_table(TABLE)
            plan = plan_compaction(table, MaintenancePolicy(min_input_files=2), everything=True)
            compact(MaintenanceTarget(open_catalog(config), config, TABLE), table, plan)
        if rng.random() < 0.2:
            table = open_catalog(config).load_table(TABLE)
            other = pa.table(
                {"id": [-1], "name": ["x"], "amount": [1.0], "ts": [None]}, schema=table.schema().as_arrow()
            )
            table.append(other)  # another tool's commit: it records no watermark
    recorded = [parse_watermark(s["icesink.watermark"]) for s in summaries(config) if "icesink.watermark" in s]
    assert recorded == sorted(recorded) and recorded


# --- after a review --------------------------------------------------------------------------------------------------


def test_in_a_stream_of_several_tables_each_keeps_its_lateness_and_its_own_counts(
    sqlite_catalog: CatalogConfig,
) -> None:
    tracker = StreamWatermark(Ledger(sqlite_catalog), 60_000_000, per_table=True, clock=lambda: 0.0)
    tracker.start("job", 0, [])
    hour = 60 * MINUTE
    relaxed = EventTimeSettings("ts", hour, ())
    strict = EventTimeSettings("ts", 0, ())
    same_split = SplitTimes('["orders",0]', micros(600), 3, late_rows=0, untimed_rows=1)
    state, shared, counts = tracker.fold(
        [
            TableTimes("a", relaxed, [WriteResult(0, 0, 0, event_times=(same_split,))]),
            TableTimes("b", strict, [WriteResult(0, 0, 0, event_times=(same_split,))]),
            TableTimes("c", None, [WriteResult(0, 0, 0)]),
        ]
    )
    # The same split of both tables: a's mark allows its hour, so the stream's watermark is a's.
    assert state.watermark == micros(600) - hour and shared["icesink.watermark"] == format_watermark(micros(540))
    assert set(state.splits) == {'["a","orders",0]', '["b","orders",0]'}
    assert counts == {
        "a": {"icesink.late-rows": "0", "icesink.rows-without-event-time": "1"},
        "b": {"icesink.late-rows": "0", "icesink.rows-without-event-time": "1"},
    }  # per table; a table without event_time counts nothing


def test_a_restarted_job_goes_on_from_its_own_watermark_not_another_jobs(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config, TABLE)
    slow = Stream(catalog_config, job="slow")
    slow.batch([(1, "a", 10)])
    Stream(catalog_config, job="fast").batch([(2, "a", 500)])  # the table's watermark moves to 08:20
    with engine(catalog_config).begin() as connection:
        connection.execute(sa.delete(checkpoints).where(checkpoints.c.catalog_name == catalog_config.name))
    slow.restart()
    properties = slow.batch([(3, "a", 20)])  # on time for the slow job, whose watermark is 00:10
    assert properties["icesink.late-rows"] == "0" and properties["icesink.watermark"] == format_watermark(micros(20))


def test_a_split_silent_for_a_day_is_forgotten_and_starts_at_the_watermark_again() -> None:
    day_ms = 24 * 3600 * 1000
    state = WatermarkState().fold({"a": micros(10), "b": micros(20)}, now_ms=0, idle_ms=60_000)
    state = state.fold({"b": micros(30)}, now_ms=day_ms + 1, idle_ms=60_000)
    assert set(state.splits) == {"b"} and state.watermark == micros(30)


@pytest.mark.parametrize(
    "array",
    [
        pa.array([213_503_982], pa.date32()),  # its microseconds overflow 64 bits
        pa.array([-62_135_596_800_000_001], pa.timestamp("us")),  # just before year 1
    ],
)
def test_an_event_time_no_watermark_can_be_is_refused_where_it_is_observed(array: pa.Array) -> None:
    times = EventTimes(EventTimeSpec("t"), TABLE)
    with pytest.raises(BadRowError, match="outside the years 1 to 9999"):
        times.observe(pa.table({"t": array}))


def test_a_split_column_that_holds_no_plain_value_is_refused() -> None:
    from pyspark.sql.types import IntegerType, StructField, StructType, TimestampType

    from icesink.errors import ConfigError
    from icesink.sink.event_time import resolve_event_time
    from icesink.sink.options import StreamOptions

    schema = StructType(
        [
            StructField("ts", TimestampType()),
            StructField("source", StructType([StructField("partition", IntegerType())])),
        ]
    )
    options = StreamOptions(table=TABLE, event_time="ts", split_by=["source"])
    with pytest.raises(ConfigError, match=r"split_by column 'source' is struct<partition:int>"):
        resolve_event_time(options, schema)


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"event_time": "ts_ms"}, r"event_time takes 'source.ts_ms'"),
        ({"lateness": "1 minute"}, r"lateness applies with event_time='source.ts_ms'"),
        ({"event_time": "source.ts_ms", "lateness": "a while"}, r"lateness: 'a while' is not a duration"),
    ],
)
def test_debezium_event_time_options_are_checked_when_given(options: dict[str, Any], refusal: str) -> None:
    from icesink.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"icesink.debezium: {refusal}"):
        icesink.debezium("inventory", **options)


def test_the_changes_carry_the_watermark_as_of_each_commit_through_other_tools_and_maintenance(
    sqlite_catalog: CatalogConfig,
) -> None:
    from icesink.maintenance.committing import MaintenanceTarget as Target

    config = sqlite_catalog
    table = create_orders_table(config, TABLE, partition_by=("hour(ts)",))
    plain = icesink.changes(TABLE, None, catalog=config, with_watermark=True)
    assert plain.num_rows == 0 and plain.column_names[-1] == "_commit_watermark"
    stream = Stream(config)
    stream.batch([(1, "a", 10)])
    table = open_catalog(config).load_table(TABLE)
    table.append(pa.Table.from_pylist([{"id": 50, "name": "x", "amount": 1.0, "ts": at(5)}], table.schema().as_arrow()))
    stream.batch([(2, "a", 70), (3, "b", 20)])
    table = open_catalog(config).load_table(TABLE)
    policy = MaintenancePolicy.of({"icesink.maintain.min-input-files": "2"}, TABLE)
    compact(Target(open_catalog(config), config, TABLE), table, plan_compaction(table, policy, everything=True))
    stream.batch([(4, "a", 90)])

    def marks(**options: Any) -> list[tuple[int, datetime.datetime | None]]:
        rows = icesink.changes(TABLE, None, catalog=config, with_watermark=True, **options).to_pylist()
        return sorted((r["id"], r["_commit_watermark"]) for r in rows)

    # Another tool's snapshot carries the watermark before it; compaction yields no change rows.
    expected = [(1, at(10)), (2, at(20)), (3, at(20)), (4, at(20)), (50, at(10))]  # split b holds it at 20
    assert marks() == expected
    assert marks(mode="append") == expected
    assert "_commit_watermark" not in icesink.changes(TABLE, None, catalog=config).column_names
