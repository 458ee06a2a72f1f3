"""Partitions done: a time partition is done once the watermark reaches its end; the commit that makes it done
says so (``icesink.partitions-done``), ``icesink partitions`` lists each partition's state, and ``icesink wait``
returns when a partition is done in every table named, at one moment of the catalog (driven without Spark)."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.completeness.partition_times import TimeField, TimeKind, human, parse_human, partition_end, span_end
from icesink.completeness.watermark import datetime_to_micros
from icesink.errors import ConfigError
from icesink.maintenance.committing import MaintenanceTarget
from icesink.maintenance.compact import compact, plan_compaction
from icesink.maintenance.policy import MaintenancePolicy
from icesink.readiness import partition_statuses
from tests.helpers.event_streams import MINUTE, TABLE, Stream, summaries
from tests.helpers.support import create_orders_table
from tests.test_cli import invoke


def hourly_table(config: CatalogConfig, properties: dict[str, str] | None = None) -> Any:
    """The orders table partitioned by hour, with ``properties`` set as a user sets them after creating it."""
    table = create_orders_table(config, TABLE, partition_by=("hour(ts)",))
    if properties:
        with table.transaction() as change:
            change.set_properties(properties)
    return table


OTHER = "shop.lines"


def utc(*args: int) -> int:
    return datetime_to_micros(datetime.datetime(*args, tzinfo=datetime.UTC))  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kind", "text", "end"),
    [
        (TimeKind.YEAR, "2024", utc(2025, 1, 1)),
        (TimeKind.MONTH, "2024-02", utc(2024, 3, 1)),
        (TimeKind.MONTH, "2024-12", utc(2025, 1, 1)),
        (TimeKind.DAY, "2024-02-29", utc(2024, 3, 1)),
        (TimeKind.HOUR, "2026-11-25-23", utc(2026, 11, 26)),
        (TimeKind.DATE, "1969-12-31", utc(1970, 1, 1)),
        (TimeKind.HOUR, "1969-12-31-23", utc(1970, 1, 1)),
        (TimeKind.TIMESTAMP, "2026-11-25T10:00:00.000001", utc(2026, 11, 25, 10, 0, 0) + 2),
    ],
)
def test_a_partition_values_span_ends_where_its_human_form_says(kind: TimeKind, text: str, end: int) -> None:
    value = parse_human(kind, text)
    assert human(kind, value) == text
    assert span_end(kind, value) == end


def test_a_partition_of_several_time_fields_ends_at_the_earliest_and_a_null_time_never_ends() -> None:
    fields = [TimeField(0, "ts_day", TimeKind.DAY), TimeField(2, "ts_hour", TimeKind.HOUR)]
    day = parse_human(TimeKind.DAY, "2026-11-25")
    hour = parse_human(TimeKind.HOUR, "2026-11-25-10")
    assert partition_end(fields, (day, "eu", hour)) == utc(2026, 11, 25, 11)
    assert partition_end(fields, (day, "eu", None)) == utc(2026, 11, 26)
    assert partition_end(fields, (None, "eu", None)) is None
    with pytest.raises(ValueError, match="write it as YYYY-MM-DD-HH"):
        parse_human(TimeKind.HOUR, "2026-11-25T10")


def test_the_commit_whose_watermark_reaches_an_hours_end_marks_it_done_and_rows_after_done_reopen_nothing(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    hourly_table(config)
    stream = Stream(config, lateness=10 * MINUTE)
    stream.batch([(1, "a", 5), (2, "a", 50)])  # watermark 00:40: hour 00 open
    stream.batch([(3, "a", 75)])  # 01:05: hour 00 done
    stream.batch([(4, "a", 20), (5, "a", 130)])  # a late row into hour 00; 02:00: hour 01 done
    done = [json.loads(s.get("icesink.partitions-done", "[]")) for s in summaries(config)]
    assert done == [[], ["ts_hour=2026-11-25-00"], ["ts_hour=2026-11-25-01"]]
    by_path = {p.path: p for p in partition_statuses(TABLE, catalog=config)}
    first = by_path["ts_hour=2026-11-25-00"]
    assert (first.state.value, first.rows, first.rows_after_done) == ("changed-after-done", 3, 1)
    assert first.done_watermark == "2026-11-25T01:05:00.000000+00:00"
    assert by_path["ts_hour=2026-11-25-01"].state.value == "done"
    assert by_path["ts_hour=2026-11-25-02"].state.value == "open"
    # Another tool adds a row to the done hour 01: counted as a change after done. Compaction moves rows only.
    table = open_catalog(config).load_table(TABLE)
    late = datetime.datetime(2026, 11, 25, 1, 30, tzinfo=datetime.UTC)
    table.append(pa.table({"id": [9], "name": ["x"], "amount": [1.0], "ts": [late]}, schema=table.schema().as_arrow()))
    table = open_catalog(config).load_table(TABLE)
    compact(
        MaintenanceTarget(open_catalog(config), config, TABLE),
        table,
        plan_compaction(table, MaintenancePolicy(min_input_files=2), everything=True),
    )
    by_path = {p.path: p for p in partition_statuses(TABLE, catalog=config)}
    second = by_path["ts_hour=2026-11-25-01"]
    assert (second.state.value, second.rows, second.rows_after_done) == ("changed-after-done", 2, 1)
    assert by_path["ts_hour=2026-11-25-00"].rows == 3  # compaction added no rows
    # The record is a cache of the table's history: dropped, it is rebuilt the same.
    from icesink.catalog.database import engine
    from icesink.catalog.partition_record import partitions, progress

    with engine(config).begin() as connection:
        for kept in (partitions, progress):
            connection.execute(kept.delete().where(kept.c.catalog_name == config.name))

    def facts(statuses: Any) -> dict[str, tuple[Any, ...]]:
        return {p.path: (p.state, p.rows, p.rows_after_done, p.done_snapshot_id) for p in statuses}

    assert facts(partition_statuses(TABLE, catalog=config)) == facts(by_path.values())


def test_a_partition_first_written_below_the_watermark_is_done_in_the_commit_that_adds_it(
    sqlite_catalog: CatalogConfig,
) -> None:
    create_orders_table(sqlite_catalog, TABLE, partition_by=("day(ts)",))
    stream = Stream(sqlite_catalog)
    stream.batch([(1, "a", 3 * 24 * 60)])  # watermark: three days later
    stream.batch([(2, "a", 60)])  # a late row, the first of day 2026-11-25
    assert json.loads(summaries(sqlite_catalog)[-1]["icesink.partitions-done"]) == ["ts_day=2026-11-25"]


def test_wait_for_partition_reads_several_tables_at_one_cut_and_refuses_what_is_not_there(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    for identifier in (TABLE, OTHER):
        create_orders_table(config, identifier, partition_by=("hour(ts)",))
    Stream(config, table=TABLE).batch([(1, "a", 70)])
    other = Stream(config, table=OTHER, job="other")
    other.batch([(1, "a", 30)])
    hour = "ts_hour=2026-11-25-00"
    assert icesink.wait_for_partition(TABLE, hour, timeout="0s", catalog=config)
    assert not icesink.wait_for_partition([TABLE, OTHER], hour, timeout="0.2s", poll="0.05s", catalog=config)
    other.batch([(2, "a", 61)])
    assert icesink.wait_for_partition([TABLE, OTHER], {"ts_hour": "2026-11-25-00"}, timeout="0s", catalog=config)
    for partition, refusal in [
        ("ts_day=2026-11-25", r"has no partition field 'ts_day' \(its fields: ts_hour\)"),
        ("ts_hour=2026-11-25", r"partition field 'ts_hour': '2026-11-25' is not a hour partition value"),
        ("2026-11-25", r"name a partition as field=value"),
    ]:
        with pytest.raises(ConfigError, match=refusal):
            icesink.wait_for_partition(TABLE, partition, timeout="0s", catalog=config)


def test_icesink_wait_as_a_scheduler_runs_it_exits_0_exactly_when_done_1_on_timeout_2_on_a_mistake(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    hourly_table(config)
    stream = Stream(config)
    stream.batch([(1, "a", 10)])
    args = [sys.executable, "-m", "icesink.cli", "--catalog", config.name, "--uri", config.uri]
    args += ["--warehouse", config.warehouse, "wait", TABLE]
    waiting = subprocess.Popen(
        [*args, "--partition", "ts_hour=2026-11-25-00", "--poll", "0.1s"],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        stream.batch([(2, "a", 59)])  # the watermark at 00:59: not yet done
        time.sleep(2.0)
        assert waiting.poll() is None, waiting.communicate()
        stream.batch([(3, "a", 60)])  # 01:00: done
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert "ts_hour=2026-11-25-00 is done" in out
    timeout = subprocess.run(
        [*args, "--partition", "ts_hour=2026-11-25-01", "--timeout", "1s"], capture_output=True, text=True
    )
    assert timeout.returncode == 1 and "is not done" in timeout.stderr
    mistake = subprocess.run([*args, "--partition", "ts_minute=3"], capture_output=True, text=True)
    assert mistake.returncode == 2 and "has no partition field 'ts_minute'" in mistake.stderr, mistake.stderr
    code, output = invoke(config, "partitions", TABLE, "--json")
    assert code == 0, output
    listed = json.loads(output)
    assert listed["watermark"] == "2026-11-25T01:00:00+00:00"
    states = [(p["partition"], p["state"]) for p in listed["partitions"]]
    assert states == [("ts_hour=2026-11-25-00", "done"), ("ts_hour=2026-11-25-01", "open")]


def test_icesink_wait_returns_only_once_a_restarted_committer_has_committed_the_checkpoint_that_finishes_it(
    sqlite_catalog: CatalogConfig,
) -> None:
    from tests.test_faults import run_committer

    config = sqlite_catalog
    hourly_table(config)
    stream = Stream(config)
    stream.batch([(1, "a", 10)])
    args = [sys.executable, "-m", "icesink.cli", "--catalog", config.name, "--uri", config.uri]
    args += ["--warehouse", config.warehouse, "wait", TABLE, "--partition", "ts_hour=2026-11-25-00", "--poll", "0.1s"]
    waiting = subprocess.Popen(args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stream.batch([(2, "a", 61)], commit=False)  # staged for the daemon: the table does not have it yet
        assert run_committer(config, "committer.before-catalog-commit") != 0  # killed before the catalog commit
        time.sleep(1.0)
        assert waiting.poll() is None, waiting.communicate()  # not done: the table still ends at 00:10
        assert run_committer(config, "committer.after-catalog-commit") != 0  # killed right after it
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0 and "is done" in out, err
    assert run_committer(config) == 0  # the restarted committer finds the checkpoint in and finishes its ledger
    done = [json.loads(s.get("icesink.partitions-done", "[]")) for s in summaries(config)]
    assert done == [[], ["ts_hour=2026-11-25-00"]]  # one commit made it done, once


# --- after a new user's break-it pass ---------------------------------------------------------------------------------


def test_a_mistake_in_any_table_of_a_wait_is_refused_at_once_whatever_their_order(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    hourly_table(config)
    create_orders_table(config, OTHER, partition_by=("day(ts)",))
    for tables in ([TABLE, OTHER], [OTHER, TABLE]):
        with pytest.raises(ConfigError, match=r"table shop.lines: it has no partition field 'ts_hour'"):
            icesink.wait_for_partition(tables, "ts_hour=2026-11-25-00", timeout="10s", catalog=config)
    create_orders_table(config, "shop.flat")
    with pytest.raises(ConfigError, match=r"table shop\.flat is not partitioned"):
        icesink.wait_for_partition("shop.flat", "ts_day=2026-11-25", timeout="0s", catalog=config)
    with pytest.raises(ConfigError, match="'null' holds the rows without a time, which no watermark reaches"):
        icesink.wait_for_partition(TABLE, "ts_hour=null", timeout="0s", catalog=config)
    with pytest.raises(ConfigError, match="'2026-11-25-1' is not a hour partition value; write it as YYYY-MM-DD-HH"):
        icesink.wait_for_partition(TABLE, "ts_hour=2026-11-25-1", timeout="0s", catalog=config)


def test_partitions_of_another_time_column_than_the_event_times_are_never_done_by_the_watermark(
    sqlite_catalog: CatalogConfig,
) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

    config = sqlite_catalog
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType()),
        NestedField(3, "amount", DoubleType()),
        NestedField(4, "ts", TimestamptzType()),
        NestedField(5, "created", TimestamptzType()),
    )
    spec = PartitionSpec(PartitionField(5, 1000, DayTransform(), "created_day"))
    catalog.create_table(TABLE, schema=schema, partition_spec=spec)
    stream = Stream(config)
    stream.batch([(1, "a", 10)])
    stream.batch([(2, "a", 5 * 24 * 60)])  # the watermark is days past anything: still no created_day is done
    assert all("icesink.partitions-done" not in s for s in summaries(config))
    assert {p.state.value for p in partition_statuses(TABLE, catalog=config)} == {"open"}
    with pytest.raises(ConfigError, match="names no time partition field of the column its watermark is about"):
        icesink.wait_for_partition(TABLE, "created_day=2026-11-25", timeout="0s", catalog=config)


def test_the_watermark_outlives_the_expiry_of_the_snapshots_that_recorded_it(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    hourly_table(config)
    fast = Stream(config, job="fast")
    fast.batch([(1, "a", 600)])
    table = open_catalog(config).load_table(TABLE)
    rows = {"id": [7], "name": ["x"], "amount": [1.0], "ts": [datetime.datetime(2026, 11, 25, 1, tzinfo=datetime.UTC)]}
    for _ in range(2):  # another tool's commits, then the icesink snapshot expires
        table.append(pa.table(rows, schema=table.schema().as_arrow()))
    table = open_catalog(config).load_table(TABLE)
    ours = [s.snapshot_id for s in table.metadata.snapshots if s.summary.get("icesink.watermark")]  # type: ignore[union-attr]
    table.maintenance.expire_snapshots().by_ids(ours).commit()
    assert icesink.watermark(TABLE, catalog=config) == datetime.datetime(2026, 11, 25, 10, tzinfo=datetime.UTC)
    # The head is another tool's: the job's record says which column the watermark is about, so hour 01 is done.
    states = {p.path: p.state.value for p in partition_statuses(TABLE, catalog=config)}
    assert states == {"ts_hour=2026-11-25-01": "done", "ts_hour=2026-11-25-10": "open"}
    Stream(config, job="slow").batch([(2, "a", 30)])  # a lower watermark: the table's stays
    assert summaries(config)[-1]["icesink.watermark"] == "2026-11-25T10:00:00.000000+00:00"
    # The record, rebuilt from the files the head holds: every row counted, the hours before 10:00 done.
    by_path = {p.path: p for p in partition_statuses(TABLE, catalog=config)}
    assert {path: p.rows for path, p in by_path.items()} == {
        "ts_hour=2026-11-25-00": 1,
        "ts_hour=2026-11-25-01": 2,
        "ts_hour=2026-11-25-10": 1,
    }
    assert by_path["ts_hour=2026-11-25-01"].state.value in ("done", "changed-after-done")


def test_a_partition_named_as_it_is_printed_reads_back_whatever_its_values_hold() -> None:
    from icesink.completeness.partition_times import parse_partition_path, partition_path

    fields = {0: ("ts_day", TimeKind.DAY), 1: ("region/zone", None)}
    day = parse_human(TimeKind.DAY, "2026-11-25")
    path = partition_path(fields, (day, "eu/west=1,a b ü"))
    assert path == "ts_day=2026-11-25/region%2Fzone=eu%2Fwest%3D1%2Ca+b+%C3%BC"
    assert parse_partition_path(path) == {"ts_day": "2026-11-25", "region/zone": "eu/west=1,a b ü"}


# --- done actions -----------------------------------------------------------------------------------------------------


class Receiver:
    """An HTTP server on loopback that keeps the JSON bodies POSTed to it (or answers 503 while ``refusing``)."""

    def __init__(self) -> None:
        import http.server
        import threading

        received: list[dict[str, Any]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.refusing:
                    self.send_response(503)
                else:
                    received.append(json.loads(body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.refusing = False
        self.received = received
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/done"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()


def test_a_done_partition_gets_its_success_file_and_its_post_once_and_gc_and_readers_leave_the_file_alone(
    sqlite_catalog: CatalogConfig,
) -> None:
    from pathlib import Path

    from icesink.committer.gc import collect_garbage

    config = sqlite_catalog
    receiver = Receiver()
    try:
        table = hourly_table(
            config, {"icesink.partition-done.success-file": "true", "icesink.partition-done.http-post": receiver.url}
        )
        stream = Stream(config)
        stream.batch([(1, "a", 10)])
        receiver.refusing = True  # the receiver is down: the commit goes in all the same
        stream.batch([(2, "a", 70)])
        assert receiver.received == []
        receiver.refusing = False
        stream.batch([(3, "a", 80)])  # the next commit tries again
        assert [r["partition"] for r in receiver.received] == ["ts_hour=2026-11-25-00"]
        stream.batch([(4, "a", 130)])  # hour 01 done; hour 00 not posted again
        assert [r["partition"] for r in receiver.received] == ["ts_hour=2026-11-25-00", "ts_hour=2026-11-25-01"]
    finally:
        receiver.close()
    first = receiver.received[0]
    assert first["table"] == TABLE and first["watermark"] == "2026-11-25T01:10:00.000000+00:00"
    table = open_catalog(config).load_table(TABLE)
    data = Path(table.location().removeprefix("file://")) / "data"
    marker = data / "ts_hour=2026-11-25-00" / "_SUCCESS"
    assert json.loads(marker.read_text())["snapshot_id"] == first["snapshot_id"]
    assert not (data / "ts_hour=2026-11-25-02" / "_SUCCESS").exists()  # open
    assert table.scan().to_arrow().num_rows == 4  # not data to any reader
    report = collect_garbage(open_catalog(config), config, TABLE, datetime.timedelta(0))
    assert marker.exists() and str(marker) not in " ".join(report.deleted)


def test_the_daemon_tries_a_failed_done_action_again_while_no_commit_comes(catalog_config: CatalogConfig) -> None:
    from icesink.committer.daemon import CommitterDaemon

    config = catalog_config
    receiver = Receiver()
    try:
        hourly_table(config, {"icesink.partition-done.http-post": receiver.url})
        stream = Stream(config)
        stream.batch([(1, "a", 10)], commit=False)
        stream.batch([(2, "a", 70)], commit=False)  # hour 00 done
        receiver.refusing = True
        CommitterDaemon(config, lease_ttl=4, actions_retry_seconds=0).run(once=True)
        assert receiver.received == []  # committed; the action failed
        receiver.refusing = False
        elsewhere = CommitterDaemon(config, tables=["shop.other"], lease_ttl=4, actions_retry_seconds=0)
        elsewhere.run(once=True)
        assert receiver.received == []  # a daemon of other tables leaves it alone
        daemon = CommitterDaemon(config, lease_ttl=4, actions_retry_seconds=0)
        daemon.run(once=True)  # nothing to commit: the action that waits is tried again
        assert [r["partition"] for r in receiver.received] == ["ts_hour=2026-11-25-00"]
        daemon.run(once=True)
        assert len(receiver.received) == 1  # once
    finally:
        receiver.close()


def test_a_table_with_done_partitions_and_no_action_is_not_loaded_at_every_retry(
    sqlite_catalog: CatalogConfig,
) -> None:
    from icesink.committer.done_actions import retry_waiting

    config = sqlite_catalog
    hourly_table(config)
    stream = Stream(config)
    stream.batch([(1, "a", 10)])
    stream.batch([(2, "a", 70)])  # hour 00 done, no action set: it waits, in case one is set later
    from icesink.catalog.partition_record import PartitionRecord

    PartitionRecord(config).keep_up(open_catalog(config).load_table(TABLE), TABLE)  # as `icesink partitions` does
    quiet: dict[str, float] = {}
    catalog = open_catalog(config)
    assert retry_waiting(catalog, config, quiet=quiet) == 0 and list(quiet) == [TABLE]
    assert retry_waiting(catalog, config, quiet=quiet) == 0  # not loaded again for a while
    with open_catalog(config).load_table(TABLE).transaction() as change:
        change.set_properties({"icesink.partition-done.success-file": "true"})
    assert retry_waiting(catalog, config, quiet={}) == 1  # an action set later: the waiting partition gets it
    assert retry_waiting(catalog, config, quiet={}) == 0  # and only once


def test_a_done_action_a_committer_died_before_runs_after_the_next_commit(sqlite_catalog: CatalogConfig) -> None:
    from pathlib import Path

    from tests.test_faults import run_committer

    config = sqlite_catalog
    hourly_table(config, {"icesink.partition-done.success-file": "true"})
    stream = Stream(config)
    stream.batch([(1, "a", 10)])
    stream.batch([(2, "a", 61)], commit=False)
    assert run_committer(config, "committer.before-done-actions") != 0  # the commit is in, its action is not
    data = Path(open_catalog(config).load_table(TABLE).location().removeprefix("file://")) / "data"
    marker = data / "ts_hour=2026-11-25-00" / "_SUCCESS"
    assert not marker.exists()
    stream.batch([(3, "a", 62)])
    assert marker.exists()


def test_a_streams_callback_is_called_once_per_done_partition_and_again_after_it_failed(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    hourly_table(config)
    calls: list[dict[str, Any]] = []
    failing = [True]

    def on_done(partition: dict[str, Any]) -> None:
        if failing[0]:
            raise RuntimeError("the scheduler is away")
        calls.append(partition)

    stream = Stream(config, on_partition_done=on_done)
    stream.batch([(1, "a", 10)])
    stream.batch([(2, "a", 70)])  # hour 00 done; the callback fails: the commit is in all the same
    assert calls == [] and icesink.wait_for_partition(TABLE, "ts_hour=2026-11-25-00", timeout="0s", catalog=config)
    failing[0] = False
    stream.batch([(3, "a", 130)])  # hour 01 done; hour 00's call made again
    assert [(c["partition"], c["table"]) for c in calls] == [
        ("ts_hour=2026-11-25-00", TABLE),
        ("ts_hour=2026-11-25-01", TABLE),
    ]
    assert calls[0]["watermark"] == "2026-11-25T01:10:00.000000+00:00" and calls[0]["snapshot_id"] is not None


def test_the_drivers_retrier_calls_a_failed_callback_again_until_it_passes_then_stops(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from icesink.committer import done_actions

    monkeypatch.setattr(done_actions, "RETRY_SECONDS", 0.05)
    config = sqlite_catalog
    hourly_table(config)
    calls: list[str] = []
    failures = [3]  # the first try after the commit, then two of the retrier's

    def on_done(partition: dict[str, Any]) -> None:
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("the scheduler is away")
        calls.append(str(partition["partition"]))

    stream = Stream(config, on_partition_done=on_done)
    stream.batch([(1, "a", 10)])
    stream.batch([(2, "a", 70)])  # hour 00 done; the call fails
    assert calls == [] and failures == [2]
    retrier = done_actions.ActionRetrier(config, on_done, threading.Lock())
    retrier.waiting([TABLE])
    deadline = time.monotonic() + 10
    while retrier._thread is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert retrier._thread is None  # nothing left to wait for: the thread ended
    assert calls == ["ts_hour=2026-11-25-00"] and failures == [0]


# --- after a second review --------------------------------------------------------------------------------------------


def test_a_partition_another_tool_starts_below_the_watermark_is_done_alike_whether_the_record_went_on_or_began_again(
    sqlite_catalog: CatalogConfig,
) -> None:
    from icesink.catalog.database import engine
    from icesink.catalog.partition_record import partitions, progress

    config = sqlite_catalog
    hourly_table(config)
    stream = Stream(config)
    stream.batch([(1, "a", 200)])
    assert partition_statuses(TABLE, catalog=config)  # the record is kept up to here
    table = open_catalog(config).load_table(TABLE)
    early = datetime.datetime(2026, 11, 25, 0, 30, tzinfo=datetime.UTC)  # hour 00: the watermark passed it
    table.append(pa.table({"id": [9], "name": ["x"], "amount": [1.0], "ts": [early]}, schema=table.schema().as_arrow()))

    def facts() -> dict[str, tuple[Any, ...]]:
        return {p.path: (p.state, p.rows, p.done_snapshot_id) for p in partition_statuses(TABLE, catalog=config)}

    went_on = facts()
    assert went_on["ts_hour=2026-11-25-00"][0].value == "done"
    with engine(config).begin() as connection:
        for kept in (partitions, progress):
            connection.execute(kept.delete().where(kept.c.catalog_name == config.name))
    assert facts() == went_on


def test_a_rollback_below_every_watermark_leaves_the_table_without_one(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    table = hourly_table(config)
    rows = {"id": [9], "name": ["x"], "amount": [1.0], "ts": [datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC)]}
    table.append(pa.table(rows, schema=table.schema().as_arrow()))  # another tool's first snapshot
    first = open_catalog(config).load_table(TABLE).current_snapshot().snapshot_id  # type: ignore[union-attr]
    Stream(config).batch([(1, "a", 130)])
    assert icesink.wait_for_partition(TABLE, "ts_hour=2026-11-25-00", timeout="0s", catalog=config)
    open_catalog(config).load_table(TABLE).manage_snapshots().rollback_to_snapshot(first).commit()
    assert icesink.watermark(TABLE, catalog=config) is None  # the job's record speaks of rolled-back snapshots
    assert not icesink.wait_for_partition(TABLE, "ts_hour=2026-11-25-00", timeout="0s", catalog=config)
    assert {p.state.value for p in partition_statuses(TABLE, catalog=config)} == {"open"}


def test_a_branchs_done_partitions_get_their_post_but_no_success_file_in_mains_directories(
    sqlite_catalog: CatalogConfig,
) -> None:
    from pathlib import Path

    config = sqlite_catalog
    calls: list[dict[str, Any]] = []
    hourly_table(config, {"icesink.partition-done.success-file": "true"})
    Stream(config, job="main").batch([(1, "a", 10)])  # main has a snapshot: the branch starts there
    open_catalog(config).load_table(TABLE).manage_snapshots().create_branch(
        open_catalog(config).load_table(TABLE).current_snapshot().snapshot_id,  # type: ignore[union-attr]
        "audit",
    ).commit()
    from icesink.committer.done_actions import DoneActions

    # The branch's partition made done by its watermark: the actions run as for main, but the file is not written.
    branch_table = open_catalog(config).load_table(TABLE)
    from icesink.catalog.database import engine
    from icesink.catalog.partition_record import PartitionRecord, partitions

    record = PartitionRecord(config)
    record.keep_up(branch_table, TABLE, "audit")
    with engine(config).begin() as connection:
        connection.execute(
            partitions.update()
            .where(partitions.c.branch == "audit")
            .values(state="done", done_snapshot_id=1, done_watermark="2026-11-25T01:00:00.000000+00:00")
        )
    DoneActions(config, calls.append).run(branch_table, TABLE, "audit")
    assert [(c["branch"], c["partition"]) for c in calls] == [("audit", "ts_hour=2026-11-25-00")]
    data = Path(branch_table.location().removeprefix("file://")) / "data"
    assert not (data / "ts_hour=2026-11-25-00" / "_SUCCESS").exists()


def test_binary_and_decimal_partition_values_keep_their_type_in_the_record() -> None:
    import decimal

    from icesink.catalog.partition_record import _values, partition_key
    from icesink.completeness.partition_times import partition_path

    values = (b"\x01/\xff", decimal.Decimal("1.50"), None)
    assert _values(partition_key(values)) == values
    fields = {0: ("tag", None), 1: ("price", None), 2: ("ts_day", TimeKind.DAY)}
    assert partition_path(fields, values) == "tag=AS%2F%2F/price=1.50/ts_day=null"
