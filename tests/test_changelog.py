"""``icesink.changes``: the changes between two snapshots, checked against a model of what was written.

Checkpoints are written and committed as a stream would (no Spark here; the
streaming source is in ``test_change_streams.py``). Replaying a changelog on
the model's state at its start snapshot must give the model's state at its
end snapshot, and every ``delete``/``update_before`` must carry the row's old
values.
"""

from __future__ import annotations

import datetime
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import icesink
from icesink.arrays import in_sorted, sorted_union
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.maintainer import Maintainer
from icesink.errors import ConfigError, SnapshotNotFoundError, StartingSnapshotExpiredError
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceRequest
from tests.test_maintenance import KEEP, TABLE, Model, commit_changes, create, random_changes

State = dict[int, str]


def replay(state: State, changes: pa.Table) -> State:
    """Apply a changelog; every old row it names must be the row the state holds."""
    state = dict(state)
    for change in changes.to_pylist():
        kind, key, value = change["_change_type"], change["id"], change["v"]
        if kind in ("delete", "update_before"):
            assert state.get(key) == value, f"{kind} of {key} says {value!r}, the row was {state.get(key)!r}"
            del state[key]
        else:
            assert key not in state, f"{kind} of {key}, which is there already"
            state[key] = value
    return state


def history(
    config: CatalogConfig, checkpoints: int, seed: int, properties: dict[str, str] | None = None
) -> list[State]:
    """Commit random checkpoints; the model's state after each."""
    create(config, properties)
    rng = random.Random(seed)
    model = Model()
    states = []
    for checkpoint in range(checkpoints):
        changes = random_changes(rng, checkpoint, keys=40, size=30)
        commit_changes(config, checkpoint, changes)
        model.apply(changes)
        states.append(dict(model.rows))
    return states


def snapshots(config: CatalogConfig) -> list[Any]:
    table = open_catalog(config).load_table(TABLE)
    return sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)


@pytest.mark.parametrize("properties", [{}, KEEP], ids=["position-deletes", "equality-deletes"])
def test_a_changelog_replayed_on_the_start_state_gives_the_end_state(
    sqlite_catalog: CatalogConfig, properties: dict[str, str]
) -> None:
    states = history(sqlite_catalog, 6, seed=3, properties=properties)
    ids = [s.snapshot_id for s in snapshots(sqlite_catalog)]
    for start in range(len(ids)):
        for end in range(start + 1, len(ids)):
            changes = icesink.changes(TABLE, ids[start], ids[end], catalog=sqlite_catalog)
            assert replay(states[start], changes) == states[end], (start, end)
    everything = icesink.changes(TABLE, None, catalog=sqlite_catalog)
    assert replay({}, everything) == states[-1]
    kinds = set(everything.column("_change_type").to_pylist())
    assert kinds == {"insert", "delete", "update_before", "update_after"}
    # The change columns: ordinal = the commit's sequence number, and the commit's snapshot and time.
    by_snapshot = {s.snapshot_id: s for s in snapshots(sqlite_catalog)}
    for change in everything.to_pylist():
        snapshot = by_snapshot[change["_commit_snapshot_id"]]
        assert change["_change_ordinal"] == snapshot.sequence_number
        moment = datetime.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, datetime.UTC)
        assert change["_commit_timestamp"] == moment


def test_updates_are_paired_by_key_and_net_changes_collapse_them(sqlite_catalog: CatalogConfig) -> None:
    create(sqlite_catalog)
    commit_changes(sqlite_catalog, 0, [(1, "a", "I"), (2, "b", "I"), (3, "c", "I")])
    commit_changes(sqlite_catalog, 1, [(1, "a2", "U"), (2, "", "D"), (4, "d", "I")])
    commit_changes(sqlite_catalog, 2, [(1, "a3", "U"), (4, "", "D"), (5, "e", "I"), (3, "c", "U")])
    first, second, third = (s.snapshot_id for s in snapshots(sqlite_catalog))

    def rows(table: pa.Table) -> list[tuple[str, int, str]]:
        return sorted((c["_change_type"], c["id"], c["v"]) for c in table.to_pylist())

    assert rows(icesink.changes(TABLE, first, second, catalog=sqlite_catalog)) == [
        ("delete", 2, "b"),
        ("insert", 4, "d"),
        ("update_after", 1, "a2"),
        ("update_before", 1, "a"),
    ]
    # Key 3 rewritten with the same value is no change; key 4 came and went: nothing net.
    net = icesink.changes(TABLE, first, third, net_changes=True, catalog=sqlite_catalog)
    assert rows(net) == [("delete", 2, "b"), ("insert", 5, "e"), ("update_after", 1, "a3"), ("update_before", 1, "a")]
    appended = icesink.changes(TABLE, first, third, mode="append", catalog=sqlite_catalog)
    assert appended.column_names == ["id", "v"]
    assert sorted(appended.to_pylist(), key=lambda r: (r["id"], r["v"])) == [
        {"id": 1, "v": "a2"},
        {"id": 1, "v": "a3"},
        {"id": 3, "v": "c"},
        {"id": 4, "v": "d"},
        {"id": 5, "v": "e"},
    ]


def difference(start: State, end: State) -> list[tuple[str, int, str]]:
    """What a reader of only the two states sees change, as net changes give it."""
    changes = [("delete", k, v) for k, v in start.items() if k not in end]
    changes += [("insert", k, v) for k, v in end.items() if k not in start]
    for key in set(start) & set(end):
        if start[key] != end[key]:
            changes += [("update_before", key, start[key]), ("update_after", key, end[key])]
    return sorted(changes)


@pytest.mark.parametrize("seed", [11, 12, 13])
@pytest.mark.parametrize("properties", [{}, KEEP], ids=["position-deletes", "equality-deletes"])
def test_net_changes_of_every_range_are_the_difference_of_its_two_states(
    sqlite_catalog: CatalogConfig, properties: dict[str, str], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across upserts, deletes of rows written in the same range, and a compaction in the middle; the rows that
    only passed through a range are not read (position deletes)."""
    from icesink.changelog import snapshot_reads

    rng = random.Random(seed)
    create(sqlite_catalog, properties)
    model, state_of = Model(), {}  # snapshot id -> the table's rows there

    def seen() -> None:
        for snapshot in snapshots(sqlite_catalog):
            state_of.setdefault(snapshot.snapshot_id, dict(model.rows))

    for checkpoint in range(8):
        changes = random_changes(rng, checkpoint, keys=25, size=20)
        commit_changes(sqlite_catalog, checkpoint, changes)
        model.apply(changes)
        seen()
        if checkpoint == 4:  # rows rewritten into new files: no change, and no row that only passed through
            table = open_catalog(sqlite_catalog).load_table(TABLE)
            Maintainer(open_catalog(sqlite_catalog), sqlite_catalog).run(
                table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True)
            )
            seen()
    ids = [s.snapshot_id for s in snapshots(sqlite_catalog)]
    assert "compact" in {s.summary.get("icesink.maintenance") for s in snapshots(sqlite_catalog)}
    states = [state_of[i] for i in ids]

    reads: list[str] = []  # the data files read, whole or at some positions
    for method in ("rows", "rows_at"):
        original = getattr(snapshot_reads.SnapshotReader, method)
        monkeypatch.setattr(
            snapshot_reads.SnapshotReader,
            method,
            lambda self, live, *rest, _original=original: reads.append(live.path) or _original(self, live, *rest),
        )
    for start in range(len(ids)):
        for end in range(start + 1, len(ids)):
            net = icesink.changes(TABLE, ids[start], ids[end], net_changes=True, catalog=sqlite_catalog)
            found = sorted((c["_change_type"], c["id"], c["v"]) for c in net.to_pylist())
            assert found == difference(states[start], states[end]), (start, end)
    net_reads = len(reads)
    reads.clear()
    for start in range(len(ids)):
        for end in range(start + 1, len(ids)):
            icesink.changes(TABLE, ids[start], ids[end], catalog=sqlite_catalog)
    if not properties:  # position deletes: what only passed through a range is not read (about 25% fewer here)
        assert net_reads < len(reads) * 0.85, (net_reads, len(reads))


def test_maintenance_snapshots_change_no_rows(sqlite_catalog: CatalogConfig) -> None:
    states = history(sqlite_catalog, 4, seed=5, properties=KEEP)
    before = snapshots(sqlite_catalog)[-1].snapshot_id
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    Maintainer(open_catalog(sqlite_catalog), sqlite_catalog).run(
        table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True)
    )
    after = snapshots(sqlite_catalog)
    assert {s.summary["icesink.maintenance"] for s in after[-2:]} == {"convert-equality-deletes", "compact"}
    assert icesink.changes(TABLE, before, catalog=sqlite_catalog).num_rows == 0
    # Reading across the maintenance commits still replays to the same state.
    first = after[0].snapshot_id
    commit_changes(sqlite_catalog, 10, [(7, "after maintenance", "U")])
    expected = {**states[-1], 7: "after maintenance"}
    assert replay(states[0], icesink.changes(TABLE, first, catalog=sqlite_catalog)) == expected


def test_copy_on_write_rewrites_by_another_engine_show_only_the_changed_rows(sqlite_catalog: CatalogConfig) -> None:
    """pyiceberg's own delete rewrites whole files: the rows copied unchanged are not changes."""
    from pyiceberg.expressions import EqualTo

    create(sqlite_catalog)
    commit_changes(sqlite_catalog, 0, [(k, f"v{k}", "I") for k in range(10)])
    before = snapshots(sqlite_catalog)[-1].snapshot_id
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    table.delete(EqualTo("id", 4))
    changes = icesink.changes(TABLE, before, catalog=sqlite_catalog)
    assert [(c["_change_type"], c["id"], c["v"]) for c in changes.to_pylist()] == [("delete", 4, "v4")]


def test_bad_ranges_and_options_are_named(sqlite_catalog: CatalogConfig) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    history(sqlite_catalog, 2, seed=1)
    with pytest.raises(SnapshotNotFoundError, match="has no snapshot 12345"):
        icesink.changes(TABLE, 12345, catalog=sqlite_catalog)
    first = snapshots(sqlite_catalog)[0].snapshot_id  # as text, as `icesink snapshots list` shows it
    by_text = icesink.changes(
        TABLE, f" {first}", str(snapshots(sqlite_catalog)[-1].snapshot_id), catalog=sqlite_catalog
    )
    assert by_text.equals(icesink.changes(TABLE, first, catalog=sqlite_catalog))
    assert icesink.changes(TABLE, np.int64(first), catalog=sqlite_catalog).equals(by_text)  # a changelog's value
    for wrong in (1.5, True, "first", "²", "--5"):
        with pytest.raises(ConfigError, match=f"start_snapshot={wrong!r} is not a snapshot id"):
            icesink.changes(TABLE, wrong, catalog=sqlite_catalog)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="mode must be one of"):
        icesink.changes(TABLE, None, mode="diff", catalog=sqlite_catalog)
    catalog = open_catalog(sqlite_catalog)
    catalog.create_table("shop.plain", Schema(NestedField(1, "x", LongType())))
    with pytest.raises(ConfigError, match="no identifier fields"):
        icesink.changes("shop.plain", None, net_changes=True, catalog=sqlite_catalog)


def test_a_start_snapshot_that_expired_is_an_error_naming_it_and_the_retention(sqlite_catalog: CatalogConfig) -> None:
    from icesink.changelog.plan import Planner

    history(sqlite_catalog, 3, seed=2)
    ids = [s.snapshot_id for s in snapshots(sqlite_catalog)]
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    table.maintenance.expire_snapshots().by_id(ids[0]).commit()  # expiry reaches the reader's last snapshot
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    with pytest.raises(StartingSnapshotExpiredError, match=rf"snapshot {ids[0]}.*history\.expire\.max-snapshot-age-ms"):
        Planner(table).snapshots(ids[0], ids[-1])


@pytest.mark.parametrize("net_changes", [False, True], ids=["changelog", "net"])
def test_a_read_from_the_oldest_snapshot_kept_starts_with_its_rows_whatever_that_snapshot_did(
    sqlite_catalog: CatalogConfig, net_changes: bool
) -> None:
    """Expiry leaves a compaction as the oldest snapshot, and pyiceberg clears its parent id: its rows are where
    the read starts, though the compaction itself changed none."""
    states = history(sqlite_catalog, 4, seed=9, properties=KEEP)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    Maintainer(open_catalog(sqlite_catalog), sqlite_catalog).run(
        table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True)
    )
    kept = snapshots(sqlite_catalog)
    assert kept[-1].summary["icesink.maintenance"] == "compact"
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in kept[:-1]]).commit()
    (oldest,) = snapshots(sqlite_catalog)
    assert oldest.parent_snapshot_id is None and oldest.sequence_number > 1
    changes = icesink.changes(TABLE, None, net_changes=net_changes, catalog=sqlite_catalog)
    assert set(changes.column("_change_type").to_pylist()) == {"insert"}
    assert replay({}, changes) == states[-1]
    commit_changes(sqlite_catalog, 10, [(7, "later", "U")])  # and on from there
    changes = icesink.changes(TABLE, None, net_changes=net_changes, catalog=sqlite_catalog)
    assert replay({}, changes) == {**states[-1], 7: "later"}


def test_the_old_rows_of_a_large_file_are_read_from_the_row_groups_holding_them(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update of two rows of a 1,000-row file of ten row groups reads two row groups, and the changelog holds
    exactly their old and new values."""
    import dataclasses

    import icesink.iceberg.file_reads as file_reads
    from icesink.catalog.ledger import Ledger
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.iceberg.describe import writer_spec
    from icesink.iceberg.read_caches import RowGroups
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import commit_changes
    from tests.test_maintenance import create as create_kv

    table = create_kv(sqlite_catalog)
    changes = ChangeSpec(equality_field_ids=(1,), op_column="op")
    spec = dataclasses.replace(writer_spec(table, KV, "cdc", changes).for_checkpoint(0), row_group_rows=100)
    writer = TaskWriter(spec, 0, 0)
    keys = list(range(1000))
    writer.write(
        pa.table(
            {
                "id": pa.array(keys, pa.int64()),
                "v": [f"first-{k}" for k in keys],
                "op": ["I"] * 1000,
                "__icesink_order": pa.array(keys, pa.int64()),
            }
        )
    )
    stage_checkpoint(Ledger(sqlite_catalog), table, KV, "cdc", 0, [writer.complete()])
    TableCommitter.of(sqlite_catalog).commit_pending(KV)
    before = open_catalog(sqlite_catalog).load_table(KV).current_snapshot().snapshot_id
    commit_changes(sqlite_catalog, 1, [(5, "new-5", "U"), (950, "new-950", "U")])
    decoded: list[object] = []

    class CountingRowGroups(RowGroups):
        def put(self, key: tuple[object, ...], batches: list[pa.RecordBatch]) -> None:
            decoded.append(key[-2])  # the row group's index in its file
            super().put(key, batches)

    monkeypatch.setattr(file_reads, "ROW_GROUP_CACHE", CountingRowGroups())
    expected = [
        ("update_after", 5, "new-5"),
        ("update_after", 950, "new-950"),
        ("update_before", 5, "first-5"),
        ("update_before", 950, "first-950"),
    ]
    found = icesink.changes(KV, before, catalog=sqlite_catalog)
    assert sorted((c["_change_type"], c["id"], c["v"]) for c in found.to_pylist()) == expected
    assert sorted(decoded) == [0, 9]  # of ten: the groups of rows 5 and 950
    # Read again in the same process: the row groups decoded are kept, the large file is not even opened, and
    # the changes are the same.
    large = {
        str(t.file.file_path) for t in open_catalog(sqlite_catalog).load_table(KV).scan(snapshot_id=before).plan_files()
    }
    opened: list[str] = []
    opening = file_reads._File.fragment

    def counted(self: Any) -> Any:
        opened.append(self.path)
        return opening(self)

    monkeypatch.setattr(file_reads._File, "fragment", counted)
    again = icesink.changes(KV, before, catalog=sqlite_catalog)
    assert sorted((c["_change_type"], c["id"], c["v"]) for c in again.to_pylist()) == expected
    assert sorted(decoded) == [0, 9]
    assert opened and not large & set(opened)


@pytest.mark.parametrize("partition_by", [("v",), ("bucket(4, id)",)], ids=["by-value", "by-key"])
def test_a_key_moved_to_another_partition_is_one_net_update_in_the_stream_tasks_too(
    sqlite_catalog: CatalogConfig, partition_by: tuple[str, ...]
) -> None:
    """The change stream's tasks (planned as its reader plans them) give what ``icesink.changes`` gives: a key
    whose update moved it to another partition is one update, not a delete in one task and an insert in another.
    Partitions derived from the key alone keep a task per partition."""
    import pyarrow.compute as pc
    from pyiceberg.expressions import EqualTo

    from icesink.changelog.plan import Planner
    from icesink.changelog.tasks import ChangeTask, group_parts, keys_stay_in_partitions, task_changes

    def rows(pairs: list[tuple[int, str]]) -> pa.Table:
        return pa.Table.from_pylist([{"id": k, "v": v} for k, v in pairs], schema=table.schema().as_arrow())

    # icesink's own writes keep a key in its partition (partition fields must be key columns); another tool's
    # copy-on-write changes need not.
    table = create(sqlite_catalog, partition_by=partition_by)
    table.append(rows([(k, f"p{k % 3}") for k in range(12)]))
    start = snapshots(sqlite_catalog)[-1].snapshot_id
    table.upsert(rows([(1, "p2"), (2, "p0"), (20, "p1")]), join_cols=["id"])
    table.delete(EqualTo("id", 4))
    table.upsert(rows([(1, "p0"), (5, "p5")]), join_cols=["id"])
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    end = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    planner = Planner(table)
    parts = [p for s in planner.snapshots(start, end) for p in planner.changes(s)]
    stay = keys_stay_in_partitions(table)
    assert stay == (partition_by != ("v",))
    groups = group_parts(parts, True, tasks=4, keys_stay=stay)
    assert len(groups) == (1 if not stay else len({p.scope for p in parts}))
    pieces = [
        rows
        for group in groups
        for rows in task_changes(
            ChangeTask(
                table.metadata_location,
                tuple(table.io.properties.items()),
                table.schema(),
                tuple(group),
                "changelog",
                True,
            )
        )
    ]

    def kinds(changes: pa.Table) -> list[tuple[str, int, str]]:
        return sorted(zip(*(changes.column(c).to_pylist() for c in ("_change_type", "id", "v")), strict=True))

    streamed = pa.concat_tables(pieces)
    expected = icesink.changes(TABLE, start, net_changes=True, catalog=sqlite_catalog)
    assert kinds(streamed) == kinds(expected)
    assert kinds(streamed.filter(pc.equal(streamed.column("id"), 2))) == [
        ("update_after", 2, "p0"),
        ("update_before", 2, "p2"),
    ]


def _overwrite_as_one_snapshot(table: Any, partition: str, rows: pa.Table) -> None:
    """One copy-on-write snapshot, as Spark's MERGE makes it: a partition's files replaced, and new files (of any
    partition) added, in one overwrite (pyiceberg's own overwrite commits a delete and an append apart)."""
    from pyiceberg.expressions import EqualTo
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    replaced = [task.file for task in table.scan(row_filter=EqualTo("v", partition)).plan_files()]
    with table.transaction() as transaction:
        added = _dataframe_to_data_files(table_metadata=transaction.table_metadata, df=rows, io=table.io)
        with transaction.update_snapshot().overwrite() as overwrite:
            for file in replaced:
                overwrite.delete_data_file(file)
            for file in added:
                overwrite.append_data_file(file)


def test_a_key_moved_to_another_partition_by_one_snapshot_is_one_update_in_every_read(
    sqlite_catalog: CatalogConfig,
) -> None:
    """Another engine's copy-on-write snapshot moves keys 1 and 4 out of partition p1 (to a partition sorting
    before it and one after) and inserts key 20 elsewhere: two updates and an insert, in ``icesink.changes`` and
    in the change stream's tasks alike. Read per partition, each move was a delete and an insert of the same
    ordinal, which a table fed by the changelog applied in partition order: key 1 was lost there."""
    from icesink.changelog.plan import Planner
    from icesink.changelog.tasks import (
        ChangeTask,
        group_parts,
        keys_stay_in_partitions,
        pairs_across_partitions,
        task_changes,
    )

    table = create(sqlite_catalog, partition_by=("v",))
    schema = table.schema().as_arrow()
    table.append(pa.Table.from_pylist([{"id": k, "v": f"p{k % 3}"} for k in range(6)], schema=schema))
    start = snapshots(sqlite_catalog)[-1].snapshot_id
    moved = [{"id": 1, "v": "p0"}, {"id": 4, "v": "p7"}, {"id": 20, "v": "p2"}]
    _overwrite_as_one_snapshot(table, "p1", pa.Table.from_pylist(moved, schema=schema))
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert len(table.snapshots()) == 2  # one snapshot made every change

    def kinds(changes: pa.Table) -> list[tuple[str, int, str]]:
        return sorted(zip(*(changes.column(c).to_pylist() for c in ("_change_type", "id", "v")), strict=True))

    expected = [
        ("insert", 20, "p2"),
        ("update_after", 1, "p0"),
        ("update_after", 4, "p7"),
        ("update_before", 1, "p1"),
        ("update_before", 4, "p1"),
    ]
    changes = icesink.changes(TABLE, start, catalog=sqlite_catalog)
    assert kinds(changes) == expected
    assert kinds(icesink.changes(TABLE, start, net_changes=True, catalog=sqlite_catalog)) == expected
    ordered = list(zip(changes.column("_change_type").to_pylist(), changes.column("id").to_pylist(), strict=True))
    for key in (1, 4):  # what a table fed by the changelog applies: the update_after last
        assert [kind for kind, k in ordered if k == key] == ["update_before", "update_after"]

    planner = Planner(table)
    parts = [p for s in planner.snapshots(start, table.current_snapshot().snapshot_id) for p in planner.changes(s)]
    assert len(parts) == 4  # the snapshot's partitions p0, p1, p2 and p7
    assert not keys_stay_in_partitions(table)
    assert pairs_across_partitions(table, "changelog") and not pairs_across_partitions(table, "append")
    groups = group_parts(parts, False, tasks=4, pair_across=True)
    assert groups == [parts]  # the snapshot deletes rows: its partitions are read by one task
    assert len(group_parts(parts, False, tasks=4)) > 1  # appends, or keys that stay: a task per share, as before
    initial = planner.state(table.current_snapshot())  # a read from the start: the state, deleting nothing
    assert len(initial) > 1 and len(group_parts(initial, False, tasks=4, pair_across=True)) > 1
    task = ChangeTask(
        table.metadata_location, tuple(table.io.properties.items()), table.schema(), tuple(parts), "changelog", False
    )
    assert kinds(pa.concat_tables(task_changes(task))) == expected


def test_tasks_follow_the_distinct_rows_read_not_the_snapshots() -> None:
    """Twenty upsert snapshots changing the same 1,000,000 rows make as many tasks as cores, not twenty; twenty
    appends of 200,000 rows each make tasks of about ROWS_PER_TASK rows; the order of the parts is kept."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    from icesink.changelog.plan import ChangedFile, Commit, NewFile, SnapshotChanges
    from icesink.changelog.tasks import ROWS_PER_TASK, group_parts
    from icesink.iceberg.deletes import GLOBAL
    from icesink.iceberg.scan import LiveFile

    def live(path: str, rows: int) -> LiveFile:
        file = DataFile.from_args(
            content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, record_count=rows
        )
        return LiveFile(file, 1)

    base = [live(f"base-{n}", 10_000) for n in range(100)]
    upserts = [
        SnapshotChanges(
            Commit(n, n, 0),
            GLOBAL,
            changed=tuple(ChangedFile(f, frozenset(), frozenset()) for f in base),
            added=(NewFile(live(f"new-{n}", 10_000), frozenset()),),
        )
        for n in range(20)
    ]
    for cores in (1, 2, 4):
        groups = group_parts(upserts, False, tasks=cores)
        assert len(groups) == cores
        assert [p for g in groups for p in g] == upserts
        assert max(len(g) for g in groups) - min(len(g) for g in groups) <= 1
    appends = [
        SnapshotChanges(Commit(n, n, 0), GLOBAL, added=(NewFile(live(f"a-{n}", 200_000), frozenset()),))
        for n in range(20)
    ]
    groups = group_parts(appends, False, tasks=1)
    assert len(groups) == -(-20 * 200_000 // ROWS_PER_TASK)
    assert all(sum(p.rows for p in g) <= ROWS_PER_TASK for g in groups)
    assert [p for g in groups for p in g] == appends
    assert group_parts(appends[:1], False, tasks=8) == [appends[:1]]  # never more tasks than parts
    assert group_parts([], False, tasks=2) == []


def test_a_regenerated_file_added_again_at_the_same_location_is_read_for_what_it_holds_now(
    sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """A daily export rewritten at one location (same size, other values) and attached again with add_files: the
    rows kept from the first read of that location in this process are not the new file's, and a table
    re-created over it with another column reads that column."""
    import os
    import uuid

    import pyarrow.parquet as pq
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from icesink.iceberg.manifests import to_data_file
    from icesink.iceberg.snapshots import commit_prepared, prepare_snapshot
    from icesink.writer.position_deletes import write_position_deletes

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("exports")
    path = tmp_path / "export" / "part-00000.parquet"
    path.parent.mkdir()

    def export(letter: str, column: str = "v") -> int:
        values = [f"{letter}-{i:04d}" for i in range(10)]
        pq.write_table(pa.table({"id": pa.array(range(10), pa.int64()), column: values}), path, compression="none")
        return os.path.getsize(path)

    def delete_first_two(table: Any) -> Any:
        location = f"{table.location()}/data/{uuid.uuid4().hex}-deletes.parquet"
        record = write_position_deletes(location, {f"file://{path}": pa.array([0, 1], pa.int64())}, 0, ())
        prepared = prepare_snapshot(table, [], {}, delete_files=[to_data_file(record, table.metadata.format_version)])
        return commit_prepared(table, prepared)

    def deleted_values(table: Any) -> list[tuple[int, str]]:
        before = table.current_snapshot().parent_snapshot_id
        found = icesink.changes(table, before, table.current_snapshot().snapshot_id)
        return sorted((row["id"], row["v"]) for row in found.to_pylist())

    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
    table = catalog.create_table("exports.daily", schema)
    first_size = export("a")
    table.add_files([f"file://{path}"])
    table = delete_first_two(catalog.load_table("exports.daily"))
    assert deleted_values(table) == [(0, "a-0000"), (1, "a-0001")]
    table.delete("true")
    assert export("b") == first_size
    table = catalog.load_table("exports.daily")
    table.add_files([f"file://{path}"])
    table = delete_first_two(catalog.load_table("exports.daily"))
    assert deleted_values(table) == [(0, "b-0000"), (1, "b-0001")]
    # Both files in one read (one reader, which keeps each file's read plan): each read for what it held.
    history = [s.snapshot_id for s in table.snapshots()]
    whole = icesink.changes(table, history[0], history[-1]).to_pylist()
    assert sorted((r["id"], r["v"]) for r in whole if r["_change_type"] == "delete" and r["id"] < 2) == [
        (0, "a-0000"),
        (0, "b-0000"),
        (1, "a-0001"),
        (1, "b-0001"),
    ]
    catalog.purge_table("exports.daily")
    assert export("c", "w") == first_size
    renamed = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "w", StringType(), required=False)
    )
    table = catalog.create_table("exports.daily", renamed)
    table.add_files([f"file://{path}"])
    assert icesink.read("exports.daily", catalog=sqlite_catalog).sort_by("id").slice(0, 1).to_pylist() == [
        {"id": 0, "w": "c-0000"}
    ]


def test_pairs_compared_value_by_value_agree_with_the_join_on_every_column() -> None:
    """The comparison an update's two rows get when keys pair rows one to one says "unchanged" exactly when the
    join on every column (the check for rows rewritten unchanged) pairs them: nulls, NaN, -0.0, nested values
    holding nulls, strings against large strings, binary."""
    from icesink.changelog.compute import _matches
    from icesink.changelog.same_rows import joinable, same_rows

    rng = random.Random(7)
    floats = [0.0, -0.0, float("nan"), None, 1.5]
    nested = [None, {"a": None, "b": [1, None]}, {"a": 1, "b": []}, {"a": 1, "b": None}]
    strings = [None, "", "x", "é"]
    for _ in range(40):
        n = 30
        left_rows = [
            (i, rng.choice(floats), rng.choice(nested), rng.choice(strings), rng.choice([None, b"\x00"]))
            for i in range(n)
        ]
        right_rows = [
            row if rng.random() < 0.5 else (row[0], rng.choice(floats), rng.choice(nested), rng.choice(strings), row[4])
            for row in left_rows
        ]

        def table(rows: list[tuple[Any, ...]], text: pa.DataType) -> pa.Table:
            columns = list(zip(*rows, strict=True))
            struct = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))])
            return pa.table(
                {
                    "id": pa.array(columns[0], pa.int64()),
                    "f": pa.array(columns[1], pa.float64()),
                    "s": pa.array(columns[2], struct),
                    "t": pa.array(columns[3], text),
                    "b": pa.array(columns[4], pa.binary()),
                }
            )

        left, right = table(left_rows, pa.string()), table(right_rows, pa.large_string())
        joined_left, joined_right = _matches(joinable(left), joinable(right), list(left.column_names))
        paired = set(zip(joined_left.to_pylist(), joined_right.to_pylist(), strict=True))
        expected = [(i, i) in paired for i in range(n)]
        assert same_rows(left, right).to_pylist() == expected


def test_a_net_change_compares_rows_as_the_changelog_does_floats_by_their_bits() -> None:
    """A NaN kept is no change and 0.0 to -0.0 is one, as for a rewrite's rows within a snapshot (a comparison
    in Python said the opposite of both)."""
    from icesink.changelog.net import net

    changes = [  # (key, x, kind, ordinal)
        (1, math.nan, "update_before", 1),
        (1, math.nan, "update_after", 1),
        (2, 0.0, "update_before", 1),
        (2, -0.0, "update_after", 2),
        (3, 1.0, "update_before", 1),
        (3, 2.0, "update_after", 1),
        (3, 2.0, "update_before", 2),
        (3, 1.0, "update_after", 2),
        (4, None, "update_before", 1),
        (4, None, "update_after", 2),
    ]
    table = pa.table(
        {
            "id": pa.array([c[0] for c in changes], pa.int64()),
            "x": pa.array([c[1] for c in changes], pa.float64()),
            "_change_type": [c[2] for c in changes],
            "_change_ordinal": pa.array([c[3] for c in changes], pa.int64()),
            "_commit_snapshot_id": pa.array([c[3] for c in changes], pa.int64()),
            "_commit_timestamp": pa.array([c[3] for c in changes], pa.timestamp("us", tz="UTC")),
        }
    )
    found = [(c["id"], c["_change_type"], math.copysign(1, c["x"])) for c in net(table, ["id"]).to_pylist()]
    assert sorted(found) == [(2, "update_after", -1.0), (2, "update_before", 1.0)]


def test_a_snapshot_of_equality_deletes_reads_only_the_files_its_keys_may_be_in(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equality deletes kept as they are: an older file whose key bounds hold none of the deleted keys keeps its
    rows, and is not read to find that out."""
    from icesink.changelog import snapshot_reads
    from icesink.iceberg.scan import live_files

    create(sqlite_catalog, KEEP)
    commit_changes(sqlite_catalog, 0, [(k, f"a{k}", "I") for k in range(0, 100)])
    commit_changes(sqlite_catalog, 1, [(k, f"b{k}", "I") for k in range(100, 200)])
    commit_changes(sqlite_catalog, 2, [(150, "b150 again", "U"), (199, "", "D"), (300, "new", "I")])
    first, second, third = (s.snapshot_id for s in snapshots(sqlite_catalog))
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    (keys_0_to_99,) = {f.path for f in live_files(table, first).data}
    (keys_100_to_199,) = {f.path for f in live_files(table, second).data} - {keys_0_to_99}
    read: list[str] = []
    original = snapshot_reads.SnapshotReader.rows
    monkeypatch.setattr(
        snapshot_reads.SnapshotReader, "rows", lambda self, live: read.append(live.path) or original(self, live)
    )
    changes = icesink.changes(TABLE, second, third, catalog=sqlite_catalog)
    assert sorted((c["_change_type"], c["id"], c["v"]) for c in changes.to_pylist()) == [
        ("delete", 199, "b199"),
        ("insert", 300, "new"),
        ("update_after", 150, "b150 again"),
        ("update_before", 150, "b150"),
    ]
    assert keys_100_to_199 in read and keys_0_to_99 not in read, read  # and the third snapshot's own file
    start = {k: f"a{k}" for k in range(100)}
    end = {**start, **{k: f"b{k}" for k in range(100, 199)}, 150: "b150 again", 300: "new"}
    assert replay(start, icesink.changes(TABLE, first, third, catalog=sqlite_catalog)) == end


@given(
    st.lists(st.integers(-5, 60), max_size=40),
    st.lists(st.integers(-5, 60), max_size=40),
    st.lists(st.integers(-10, 70), max_size=40),
)
def test_the_set_operations_on_sorted_positions_agree_with_numpys(
    first: list[int], second: list[int], probes: list[int]
) -> None:
    # What a catch-up read keeps per data file: the positions deleted before, grown by each snapshot's own.
    a, b = np.unique(np.array(first, np.int64)), np.unique(np.array(second, np.int64))
    assert sorted_union(a, b).tolist() == np.union1d(a, b).tolist()
    values = np.array(probes, np.int64)
    assert in_sorted(values, a).tolist() == np.isin(values, a).tolist()
