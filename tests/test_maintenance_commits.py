"""A maintenance pass commits its groups in a few snapshots, not one each.

Every commit rewrites the manifests listing the files it replaces, and over a table of many partitions those
list every partition: a commit per group made a pass cost the square of the partitions (a table of 300
partitions did not finish in minutes). Groups are written one by one, as before, and committed together,
``icesink.maintain.max-commits`` snapshots at most; each group is still judged on its own against what was
committed since the pass's base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.iceberg import history
from icesink.iceberg.scan import live_files
from icesink.maintenance.compact import compact, plan_compaction
from icesink.maintenance.merge_deletes import merge_position_deletes, plan_delete_merges
from icesink.maintenance.policy import MaintenancePolicy
from icesink.properties import MAINTENANCE_PROPERTY
from tests.test_maintenance import TABLE, Model, commit_changes, create, rows_by_every_reader, target
from tests.test_maintenance_cost import load, position_deletes_in_every_bucket

BUCKETS = 8


def small_files_in_every_bucket(config: CatalogConfig, properties: dict[str, str] | None = None) -> Model:
    """Three checkpoints of inserts, each a small file in each of 8 buckets."""
    create(config, properties, partition_by=(f"bucket({BUCKETS}, id)",))
    model = Model()
    for checkpoint in range(3):
        inserts = [(key, f"c{checkpoint}-{key}", "I") for key in range(checkpoint * 100, checkpoint * 100 + 100)]
        commit_changes(config, checkpoint, inserts)
        model.apply(inserts)
    return model


def maintenance_snapshots(table: Any, base: int) -> list[str | None]:
    """The maintenance kinds of the snapshots on the head's ancestry after snapshot ``base``."""
    kinds = []
    snapshot = table.current_snapshot()
    while snapshot.snapshot_id != base:
        kinds.append(snapshot.summary[MAINTENANCE_PROPERTY] if snapshot.summary else None)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return kinds


def maintenance_files(config: CatalogConfig) -> set[str]:
    """The data files maintenance wrote that are in the warehouse."""
    root = Path(config.warehouse.removeprefix("file://"))
    return {f"file://{p}" for p in root.rglob("maintenance-*.parquet") if not p.name.endswith("-deletes.parquet")}


def test_a_pass_over_many_partitions_commits_its_groups_in_at_most_max_commits_snapshots(
    catalog_config: CatalogConfig,
) -> None:
    model = small_files_in_every_bucket(catalog_config)
    table = load(catalog_config)
    base = table.current_snapshot().snapshot_id
    plan = plan_compaction(table, MaintenancePolicy(), everything=True)
    assert len(plan.groups) == BUCKETS  # one group a partition
    reported: list[int] = []
    table, result = compact(
        target(catalog_config), table, plan, progress=lambda number, *_: reported.append(number), max_commits=3
    )
    assert result.groups_committed == BUCKETS and result.groups_failed == [] and result.files_rewritten == 24
    assert len(result.snapshot_ids) == 3  # 3 + 3 + 2 groups
    assert maintenance_snapshots(load(catalog_config), base) == ["compact"] * 3
    assert reported == list(range(BUCKETS))
    assert len(live_files(load(catalog_config)).data) == BUCKETS
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()
    assert icesink.changes(load(catalog_config), base, catalog=catalog_config).num_rows == 0


def test_a_stopped_pass_commits_the_groups_it_wrote_and_the_table_property_sets_the_commits(
    sqlite_catalog: CatalogConfig,
) -> None:
    model = small_files_in_every_bucket(sqlite_catalog, {"icesink.maintain.max-commits": "1"})
    table = load(sqlite_catalog)
    policy = MaintenancePolicy.of(table.properties, TABLE)
    assert policy.max_commits == 1
    plan = plan_compaction(table, policy, everything=True)
    asked = [0]

    def three_groups() -> bool:
        asked[0] += 1
        return asked[0] < 3

    table, result = compact(target(sqlite_catalog), table, plan, three_groups, max_commits=policy.max_commits)
    assert result.stopped_early and result.groups_committed == 3 and len(result.snapshot_ids) == 1
    written = maintenance_files(sqlite_catalog)
    assert len(written) == 3 and written <= {d.path for d in live_files(load(sqlite_catalog)).data}
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_group_a_newer_delete_reaches_is_left_for_the_next_pass_and_the_others_of_its_commit_land(
    catalog_config: CatalogConfig,
) -> None:
    model = small_files_in_every_bucket(catalog_config)
    table = load(catalog_config)
    plan = plan_compaction(table, MaintenancePolicy(), everything=True)
    raced = [False]

    def delete_meanwhile() -> None:  # a position delete (converted at commit) against one group's file
        if not raced[0]:
            raced[0] = True
            commit_changes(catalog_config, 100, [(150, "", "D")])

    table, result = compact(target(catalog_config, delete_meanwhile), table, plan, max_commits=1)
    model.apply([(150, "", "D")])
    assert raced[0] and result.groups_committed == BUCKETS - 1 and len(result.snapshot_ids) == 1
    assert len(result.groups_failed) == 1 and "position delete" in result.groups_failed[0]
    live = {d.path for d in live_files(load(catalog_config)).data}
    assert maintenance_files(catalog_config) <= live  # the refused group's new files are deleted
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()
    table = load(catalog_config)
    table, retried = compact(target(catalog_config), table, plan_compaction(table, MaintenancePolicy(), True))
    assert retried.groups_committed >= 1 and retried.groups_failed == []
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()


def test_what_a_maintenance_commit_remembers_of_itself_is_what_its_manifests_say(sqlite_catalog: CatalogConfig) -> None:
    small_files_in_every_bucket(sqlite_catalog)
    table = load(sqlite_catalog)
    table, result = compact(
        target(sqlite_catalog), table, plan_compaction(table, MaintenancePolicy(), everything=True), max_commits=2
    )
    table = load(sqlite_catalog)
    for snapshot_id in result.snapshot_ids:
        snapshot = table.snapshot_by_id(snapshot_id)
        key = (table.metadata.table_uuid, snapshot_id)
        remembered = history._CHANGES.get(key)
        assert remembered is not None
        history._CHANGES._values.pop(key)
        read = history._own_changes(table, snapshot)
        assert remembered[1] == read[1] and len(read[1]) == 12  # 4 groups of 3 files replaced
        described = sorted(
            (f.path, f.sequence_number, f.file.content, f.file.spec_id, tuple(f.file.partition), f.file.record_count)
            for f in remembered[0]
        )
        assert described == sorted(
            (f.path, f.sequence_number, f.file.content, f.file.spec_id, tuple(f.file.partition), f.file.record_count)
            for f in read[0]
        )


def test_merges_of_many_partitions_commit_in_at_most_max_commits_snapshots(sqlite_catalog: CatalogConfig) -> None:
    model = position_deletes_in_every_bucket(sqlite_catalog, BUCKETS, keys=800, every=7)
    table = load(sqlite_catalog)
    plan = plan_delete_merges(table, target(sqlite_catalog))
    assert len(plan.merges) == BUCKETS
    _, result = merge_position_deletes(target(sqlite_catalog), table, plan, max_bytes=1, max_commits=3)
    assert result.commits == 3 and result.conflict is None and result.delete_files_rewritten == 2 * BUCKETS
    assert all(len(d.file.partition) == 1 for d in live_files(load(sqlite_catalog)).position_deletes)
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_merge_that_cannot_be_written_costs_the_pass_only_itself(
    sqlite_catalog: CatalogConfig, monkeypatch: Any
) -> None:
    """As with compaction: the merges written before the failing one are committed, and its error is raised."""
    from icesink.maintenance import merge_deletes
    from icesink.properties import MAINTENANCE_MERGE_DELETES

    model = position_deletes_in_every_bucket(sqlite_catalog, BUCKETS, keys=800, every=7)
    table = load(sqlite_catalog)
    before = len(live_files(table).position_deletes)
    plan = plan_delete_merges(table, target(sqlite_catalog))
    write = merge_deletes._write_merged
    calls = []

    def third_fails(table: Any, merge: Any) -> Any:
        calls.append(merge)
        if len(calls) == 3:
            raise OSError("the disk is full")
        return write(table, merge)

    monkeypatch.setattr(merge_deletes, "_write_merged", third_fails)
    try:
        merge_position_deletes(target(sqlite_catalog), table, plan, max_bytes=1, max_commits=1)
    except OSError as e:
        assert "disk is full" in str(e)
    else:
        raise AssertionError("the failed merge's error was not raised")
    table = load(sqlite_catalog)
    assert table.current_snapshot().summary[MAINTENANCE_PROPERTY] == MAINTENANCE_MERGE_DELETES
    assert len(live_files(table).position_deletes) == before - 2 * 2 + 2  # two partitions merged, one file each
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_group_that_cannot_be_rewritten_costs_the_pass_only_itself(
    sqlite_catalog: CatalogConfig, monkeypatch: Any
) -> None:
    """The groups written before the failing one are committed, as they were when each group had its commit."""
    from icesink.maintenance import compact as compaction

    model = small_files_in_every_bucket(sqlite_catalog)
    table = load(sqlite_catalog)
    plan = plan_compaction(table, MaintenancePolicy(), everything=True)
    rewrite = compaction._rewrite

    def third_fails(target: Any, table: Any, plan: Any, group: Any, number: int, deletes: Any) -> Any:
        if number == 2:
            raise OSError("the disk is full")
        return rewrite(target, table, plan, group, number, deletes)

    monkeypatch.setattr(compaction, "_rewrite", third_fails)
    try:
        compact(target(sqlite_catalog), table, plan, max_commits=1)
    except OSError as e:
        assert "disk is full" in str(e)
    else:
        raise AssertionError("the failed group's error was not raised")
    table = load(sqlite_catalog)
    assert table.current_snapshot().summary[MAINTENANCE_PROPERTY] == "compact"
    assert len(live_files(table).data) == 24 - 2 * 3 + 2  # two partitions compacted, the others as they were
    assert maintenance_files(sqlite_catalog) <= {d.path for d in live_files(table).data}
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_partition_spec_changed_during_a_pass_ends_it_and_no_file_is_filed_under_the_wrong_partition(
    sqlite_catalog: CatalogConfig,
) -> None:
    """Another tool replaces ``bucket(8, id)`` by ``bucket(4, id)`` right before the pass's first commit: that
    commit's groups land (written and recorded under the spec they were read with), and the groups after it are
    left, since a file's partition values must be those of its own spec (they were filed under the new spec with
    the old values, and filtered reads lost their rows)."""
    import pyarrow.parquet as pq
    from pyiceberg.expressions import EqualTo
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    model = small_files_in_every_bucket(sqlite_catalog)
    table = load(sqlite_catalog)
    plan = plan_compaction(table, MaintenancePolicy(), everything=True)
    changed = [False]

    def replace_spec() -> None:
        if not changed[0]:
            changed[0] = True
            with load(sqlite_catalog).update_spec() as update:
                update.remove_field("id_bucket")
                update.add_field("id", BucketTransform(4), "id_b4")

    _, result = compact(target(sqlite_catalog, replace_spec), table, plan, max_commits=2)
    assert changed[0] and result.groups_committed == 4 and len(result.snapshot_ids) == 1
    assert len(result.groups_failed) == 4 and "partition spec changed" in result.groups_failed[0]
    table = load(sqlite_catalog)
    for live in live_files(table).data:  # every file's partition value is its rows' bucket under its own spec
        transform = table.specs()[live.file.spec_id].fields[0].transform
        bucket = transform.transform(LongType())
        ids = pq.read_table(live.path.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
        assert {bucket(i) for i in ids} == {live.file.partition[0]}
    for key in (9, 150, 299):
        found = table.scan(row_filter=EqualTo("id", key)).to_arrow().to_pylist()
        assert [(r["id"], r["v"]) for r in found] == [(key, model.rows[key])]
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()
