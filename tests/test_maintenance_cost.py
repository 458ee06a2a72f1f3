"""Maintenance whose cost follows the change: deletes merged instead of rows rewritten, small files by size tier.

A data file whose deletes remove little of it keeps its rows; its position deletes are merged into one delete
file of its own. It is rewritten once they remove ``delete-ratio-threshold`` of it or number
``delete-file-threshold``. Small files wait for others of about their size. Every end state is read by icesink,
pyiceberg and iceberg-rust against a model, and the changelog of every maintenance snapshot is empty.
"""

from __future__ import annotations

from typing import Any

import pytest

import icesink
from icesink.audit.chain import changes_no_row
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.maintainer import Maintainer
from icesink.iceberg.scan import live_files
from icesink.maintenance.choosing import TIER_FACTOR, TIERS, count_position_deletes, size_tier
from icesink.maintenance.compact import plan_compaction
from icesink.maintenance.merge_deletes import merge_position_deletes, plan_delete_merges
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceRequest
from tests.test_maintenance import (
    MAINTAIN_LEASE_TTL,
    TABLE,
    Model,
    commit_changes,
    create,
    rows_by_every_reader,
    run_maintain,
    target,
)

# Every file full-size (nothing is small), maintenance due after every commit.
NOTHING_SMALL = {"icesink.maintain.min-file-ratio": "0", "icesink.maintain.min-commits": "1"}


def load(config: CatalogConfig) -> Any:
    return open_catalog(config).load_table(TABLE)


def oldest(table: Any) -> Any:
    """The first checkpoint's data file: 1,000 rows."""
    return min(live_files(table).data, key=lambda d: d.sequence_number)


def maintain(config: CatalogConfig, everything: bool = False) -> Any:
    table = load(config)
    policy = MaintenancePolicy.of(table.properties, TABLE)
    return Maintainer(open_catalog(config), config).run(table, TABLE, MaintenanceRequest(policy, everything))


def base_and_updates(config: CatalogConfig, properties: dict[str, str], updates: list[list[int]]) -> Model:
    """1,000 rows in one checkpoint, then one checkpoint updating each list of keys (deletes converted at commit)."""
    create(config, properties)
    model = Model()
    inserts = [(key, f"first-{key}", "I") for key in range(1000)]
    commit_changes(config, 0, inserts)
    model.apply(inserts)
    for checkpoint, keys in enumerate(updates, start=1):
        changes = [(key, f"v{checkpoint}-{key}", "U") for key in keys]
        commit_changes(config, checkpoint, changes)
        model.apply(changes)
    return model


def position_deletes_in_every_bucket(config: CatalogConfig, buckets: int, keys: int, every: int) -> Model:
    """``keys`` rows in ``buckets`` partitions, a maintenance group each, then two checkpoints updating every
    ``every``-th key: every partition's data file with two position delete files to merge."""
    properties = {**NOTHING_SMALL, "icesink.maintain.max-group-bytes": "1"}  # one partition a group
    create(config, properties, partition_by=(f"bucket({buckets}, id)",))
    model = Model()
    inserts = [(key, f"first-{key}", "I") for key in range(keys)]
    commit_changes(config, 0, inserts)
    model.apply(inserts)
    for checkpoint in (1, 2):
        changes = [(key, f"v{checkpoint}", "U") for key in range(checkpoint, keys, every)]
        commit_changes(config, checkpoint, changes)
        model.apply(changes)
    return model


def check_readers_and_changelog(config: CatalogConfig, model: Model, since: int) -> None:
    """Every reader sees the model, and the snapshots after ``since`` (maintenance only) change no row."""
    for rows in rows_by_every_reader(config):
        assert rows == model.expected()
    changes = icesink.changes(load(config), since, catalog=config)
    assert changes.num_rows == 0


def test_a_file_with_few_deletes_keeps_its_rows_and_its_position_deletes_become_one_file(
    catalog_config: CatalogConfig,
) -> None:
    model = base_and_updates(catalog_config, NOTHING_SMALL, [[1, 2, 3], [10, 11], [20], [30, 31]])
    table = load(catalog_config)
    base = oldest(table)  # the oldest data file: 1,000 rows, 8 of them deleted by 4 files
    assert base.file.record_count == 1000
    counts = count_position_deletes(table.io, (d.file for d in live_files(table).position_deletes))
    assert counts.files_naming(base.path) == 4 and counts.deleted(base.path) == 8
    head = table.current_snapshot().snapshot_id

    report = maintain(catalog_config)

    assert report.compaction is None or report.compaction.files_rewritten == 0  # 0.8% deleted: no rewrite
    assert report.merge is not None and report.merge.delete_files_rewritten == 4
    after = live_files(load(catalog_config))
    assert base.path in {d.path for d in after.data}  # the 1,000-row file is untouched
    naming_base = count_position_deletes(load(catalog_config).io, (d.file for d in after.position_deletes))
    assert naming_base.files_naming(base.path) == 1 and naming_base.deleted(base.path) == 8
    for delete in after.position_deletes:  # one file per data file, and it says which
        assert naming_base_count(delete) == 1
    snapshot = load(catalog_config).current_snapshot()
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary["icesink.maintenance"] == "rewrite-position-deletes"
    assert changes_no_row(snapshot)  # every position kept: a branch's audit lets it through
    check_readers_and_changelog(catalog_config, model, head)

    # The next pass has nothing to merge; a new checkpoint's deletes are merged into the file of its data file.
    assert maintain(catalog_config).merge is None
    changes = [(5, "later", "U")]
    commit_changes(catalog_config, 5, changes)
    model.apply(changes)
    report = maintain(catalog_config)
    assert report.merge is not None and report.merge.delete_files_written >= 1
    assert base.path in {d.path for d in live_files(load(catalog_config)).data}
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()


def naming_base_count(delete: Any) -> int:
    """How many data files a position delete file names (its file_path bounds, equal when it names one)."""
    from icesink.maintenance.choosing import named_by

    return 1 if named_by(delete.file) is not None else 2


def test_a_file_whose_deletes_pass_the_ratio_is_rewritten(sqlite_catalog: CatalogConfig) -> None:
    properties = {**NOTHING_SMALL, "icesink.maintain.delete-ratio-threshold": "0.25"}
    model = base_and_updates(sqlite_catalog, properties, [list(range(0, 200)), list(range(200, 300))])
    base = oldest(load(sqlite_catalog))
    head = load(sqlite_catalog).current_snapshot().snapshot_id

    report = maintain(sqlite_catalog)

    assert report.compaction is not None and report.compaction.files_rewritten >= 1  # 30% deleted
    after = live_files(load(sqlite_catalog))
    assert base.path not in {d.path for d in after.data}
    check_readers_and_changelog(sqlite_catalog, model, head)


def test_a_file_named_by_enough_delete_files_is_rewritten_whatever_its_share(sqlite_catalog: CatalogConfig) -> None:
    properties = {**NOTHING_SMALL, "icesink.maintain.delete-file-threshold": "3"}
    model = base_and_updates(sqlite_catalog, properties, [[1], [2], [3]])
    base = oldest(load(sqlite_catalog))
    plan = plan_compaction(load(sqlite_catalog), MaintenancePolicy.of(load(sqlite_catalog).properties, TABLE))
    assert base.path in {str(f.file.file_path) for g in plan.groups for f in g.files}
    maintain(sqlite_catalog)
    assert base.path not in {d.path for d in live_files(load(sqlite_catalog)).data}
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_all_rewrites_every_file_with_a_delete(sqlite_catalog: CatalogConfig) -> None:
    model = base_and_updates(sqlite_catalog, NOTHING_SMALL, [[1], [2]])
    report = maintain(sqlite_catalog, everything=True)
    assert report.compaction is not None and report.compaction.files_rewritten >= 1
    after = live_files(load(sqlite_catalog))
    assert after.position_deletes == [] and after.equality_deletes == []
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_positions_naming_a_rewritten_file_are_dropped_and_the_others_merged(sqlite_catalog: CatalogConfig) -> None:
    """One checkpoint's delete file names two data files; the small one is compacted away, the big one keeps its
    rows, and the merge keeps only the big one's positions."""
    # The table's files: the 1,000-row base is full-size, the 3-row checkpoints small.
    model = base_and_updates(sqlite_catalog, {"icesink.maintain.min-commits": "1"}, [])
    table = load(sqlite_catalog)
    size = oldest(table).file.file_size_in_bytes
    with table.transaction() as change:
        change.set_properties({"write.target-file-size-bytes": str(size), "icesink.maintain.min-file-ratio": "0.9"})
    for checkpoint in (1, 2):
        changes = [(5000 + checkpoint, "new", "I"), (checkpoint, "again", "U")]
        commit_changes(sqlite_catalog, checkpoint, changes)
        model.apply(changes)
    changes = [(5001, "newer", "U"), (5002, "newer", "U"), (7, "newer", "U")]  # names three data files
    commit_changes(sqlite_catalog, 3, changes)
    model.apply(changes)
    table = load(sqlite_catalog)
    base = oldest(table)
    head = table.current_snapshot().snapshot_id

    report = maintain(sqlite_catalog)

    assert report.compaction is not None and report.compaction.files_rewritten == 3  # the three small ones
    assert report.merge is not None and report.merge.delete_files_rewritten == 3 and report.merge.positions == 3
    after = live_files(load(sqlite_catalog))
    assert base.path in {d.path for d in after.data} and len(after.data) == 2
    assert len(after.position_deletes) == 1
    merge = load(sqlite_catalog).current_snapshot()  # positions naming gone files dropped, and said so
    dropped = int(merge.summary["icesink.maintenance.dropped-positions"])
    assert dropped > 0 and int(merge.summary["added-position-deletes"]) + dropped == int(
        merge.summary["removed-position-deletes"]
    )
    assert changes_no_row(merge)
    counts = count_position_deletes(load(sqlite_catalog).io, (d.file for d in after.position_deletes))
    assert counts.deleted(base.path) == 3  # keys 1, 2 and 7 of the base
    check_readers_and_changelog(sqlite_catalog, model, head)


def test_small_files_wait_for_others_of_their_size() -> None:
    small = 4.0**6
    assert size_tier(0, small) == 0 and size_tier(int(small / TIER_FACTOR**TIERS) - 1, small) == 0
    assert size_tier(int(small) - 1, small) == TIERS
    # Each tier starts at a power of 4 below the small size.
    assert [size_tier(int(small / TIER_FACTOR**k), small) for k in range(1, TIERS + 1)] == list(range(TIERS, 0, -1))
    below = [size_tier(int(small / TIER_FACTOR**k) - 1, small) for k in range(1, TIERS + 1)]
    assert below == list(range(TIERS - 1, -1, -1))


def test_a_big_small_file_is_not_rewritten_to_take_in_a_few_tiny_ones(sqlite_catalog: CatalogConfig) -> None:
    model = base_and_updates(sqlite_catalog, {"icesink.maintain.min-commits": "1"}, [])
    table = load(sqlite_catalog)
    base = oldest(table)
    with table.transaction() as change:  # the base within a factor of 4 of the small size: the top tier
        change.set_properties({"write.target-file-size-bytes": str(base.file.file_size_in_bytes * 2)})
    for checkpoint in range(1, 8):  # seven tiny files, each far below the base's tier
        changes = [(5000 + checkpoint, f"tiny-{checkpoint}", "I")]
        commit_changes(sqlite_catalog, checkpoint, changes)
        model.apply(changes)

    report = maintain(sqlite_catalog)

    assert report.compaction is not None and report.compaction.files_rewritten == 7
    after = live_files(load(sqlite_catalog))
    assert base.path in {d.path for d in after.data} and len(after.data) == 2
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()
    # With everything, the base goes too.
    maintain(sqlite_catalog, everything=True)
    assert len(live_files(load(sqlite_catalog)).data) == 1
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_checkpoint_committed_during_a_merge_keeps_its_deletes(sqlite_catalog: CatalogConfig) -> None:
    model = base_and_updates(sqlite_catalog, NOTHING_SMALL, [[1], [2]])
    table = load(sqlite_catalog)
    raced = [False]
    late = [(3, "during the merge", "U")]

    def commit_meanwhile() -> None:
        if not raced[0]:
            raced[0] = True
            commit_changes(sqlite_catalog, 3, late)

    plan = plan_delete_merges(table, target(sqlite_catalog))
    assert len(plan.merges) == 1
    _, result = merge_position_deletes(target(sqlite_catalog, commit_meanwhile), table, plan, 2**30)
    model.apply(late)
    assert raced[0] and result.conflict is None and result.delete_files_rewritten == 2
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_merge_whose_delete_file_was_removed_since_is_left_for_the_next_pass(sqlite_catalog: CatalogConfig) -> None:
    model = base_and_updates(sqlite_catalog, NOTHING_SMALL, [[1], [2]])
    table = load(sqlite_catalog)
    plan = plan_delete_merges(table, target(sqlite_catalog))
    maintain(sqlite_catalog, everything=True)  # another maintenance rewrote the file and dropped its deletes
    _, result = merge_position_deletes(target(sqlite_catalog), table, plan, 2**30)
    assert result.conflict is not None and "removed since" in result.conflict
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


@pytest.mark.faults
@pytest.mark.parametrize("moment", ["maintain.merge.after-write", "maintain.before-commit", "maintain.after-commit"])
def test_a_merge_killed_at_every_moment_leaves_the_table_exact(catalog_config: CatalogConfig, moment: str) -> None:
    import signal
    import time

    if catalog_config.uri.startswith("sqlite") and moment != "maintain.merge.after-write":
        pytest.skip("covered on PostgreSQL")
    model = base_and_updates(catalog_config, NOTHING_SMALL, [[1, 2], [3]])
    assert run_maintain(catalog_config, moment, everything=False) == -signal.SIGKILL
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()
    time.sleep(MAINTAIN_LEASE_TTL + 0.1)  # the killed maintainer's lease expires
    assert run_maintain(catalog_config, everything=False) == 0
    live = live_files(load(catalog_config))
    assert len(live.position_deletes) == 1 and oldest(load(catalog_config)).path in {d.path for d in live.data}
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()


@pytest.mark.parametrize("merge_kind", ["rewrite-position-deletes"])
def test_a_merge_that_drops_positions_or_adds_rows_is_audited(merge_kind: str) -> None:
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary

    def snapshot(**summary: str) -> Snapshot:
        return Snapshot(
            snapshot_id=1,
            sequence_number=1,
            timestamp_ms=0,
            manifest_list="x",
            summary=Summary(Operation.REPLACE, **{"icesink.maintenance": merge_kind, **summary}),
        )

    kept = {"added-position-deletes": "8", "removed-position-deletes": "8"}
    assert changes_no_row(snapshot(**kept))
    assert not changes_no_row(snapshot(**{**kept, "added-position-deletes": "7"}))  # a position gone, unsaid
    assert changes_no_row(
        snapshot(**{**kept, "added-position-deletes": "7", "icesink.maintenance.dropped-positions": "1"})
    )
    assert not changes_no_row(snapshot(**kept, **{"added-data-files": "1", "added-records": "3"}))


def test_a_pass_that_only_merges_counts_as_a_pass(sqlite_catalog: CatalogConfig) -> None:
    """Delete-only commits: maintenance is due every min-commits commits, not after every commit once due."""
    create(sqlite_catalog, {"icesink.maintain.min-file-ratio": "0"})
    model = Model()
    inserts = [(key, f"first-{key}", "I") for key in range(1000)]
    commit_changes(sqlite_catalog, 0, inserts)
    model.apply(inserts)
    maintainer = Maintainer(open_catalog(sqlite_catalog), sqlite_catalog)
    for checkpoint in range(1, 31):
        changes = [(checkpoint * 3, "", "D"), (checkpoint * 3 + 1, "", "D")]
        commit_changes(sqlite_catalog, checkpoint, changes)
        model.apply(changes)
        maintainer.between_commits(load(sqlite_catalog), TABLE)
    kinds = [s.summary.get("icesink.maintenance") for s in load(sqlite_catalog).snapshots()]
    assert kinds.count("rewrite-position-deletes") == 3  # after commits 10, 20 and 30
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_row_deleted_again_by_later_updates_counts_once(sqlite_catalog: CatalogConfig) -> None:
    """Each commit's conversion names the rows of an updated key again: five updates of one key of a 20-row file
    delete one row of it (5%), not five (25%, over a 0.2 threshold)."""
    create(sqlite_catalog, {**NOTHING_SMALL, "icesink.maintain.delete-ratio-threshold": "0.2"})
    model = Model()
    inserts = [(key, f"first-{key}", "I") for key in range(20)]
    commit_changes(sqlite_catalog, 0, inserts)
    model.apply(inserts)
    for checkpoint in range(1, 6):
        changes = [(1, f"v{checkpoint}", "U")]
        commit_changes(sqlite_catalog, checkpoint, changes)
        model.apply(changes)
    table = load(sqlite_catalog)
    base = oldest(table)
    counts = count_position_deletes(table.io, (d.file for d in live_files(table).position_deletes))
    assert counts.deleted(base.path) == 5 and counts.distinct_deleted(table.io, base.path) == 1
    report = maintain(sqlite_catalog)
    assert base.path in {d.path for d in live_files(load(sqlite_catalog)).data}  # kept its rows
    assert report.merge is not None and changes_no_row(load(sqlite_catalog).current_snapshot())
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_delete_files_naming_only_files_another_tool_rewrote_are_dropped(sqlite_catalog: CatalogConfig) -> None:
    from pyiceberg.expressions import In

    model = base_and_updates(sqlite_catalog, NOTHING_SMALL, [[1, 2], [3, 4]])
    load(sqlite_catalog).delete(In("id", [10]))  # pyiceberg rewrites the base file without row 10 (copy-on-write)
    model.rows.pop(10)
    assert len(live_files(load(sqlite_catalog)).position_deletes) == 2  # naming only the old base now

    report = maintain(sqlite_catalog)

    assert report.merge is not None and report.merge.delete_files_rewritten == 2
    assert report.merge.delete_files_written == 0
    assert live_files(load(sqlite_catalog)).position_deletes == []
    assert changes_no_row(load(sqlite_catalog).current_snapshot())
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_dry_run_says_what_it_would_merge_and_all_plans_no_merge_compaction_makes_needless(
    sqlite_catalog: CatalogConfig,
) -> None:
    from tests.test_write_audit_publish import cli_run

    base_and_updates(sqlite_catalog, NOTHING_SMALL, [[1], [2]])
    dry = cli_run(sqlite_catalog, "maintain", TABLE, "--dry-run")
    assert dry.exit_code == 0 and "merge the position deletes of 1 partition(s)" in dry.output, dry.output
    everything = cli_run(sqlite_catalog, "maintain", TABLE, "--dry-run", "--all")
    assert "merge the position deletes of 0 partition(s)" in everything.output, everything.output


def test_merges_commit_by_groups_of_max_group_bytes_and_stop_when_checkpoints_wait(
    sqlite_catalog: CatalogConfig,
) -> None:
    model = position_deletes_in_every_bucket(sqlite_catalog, buckets=4, keys=400, every=37)
    table = load(sqlite_catalog)
    plan = plan_delete_merges(table, target(sqlite_catalog))
    assert len(plan.merges) == 4
    asked = [0]

    def stop() -> bool:
        asked[0] += 1
        return False

    _, result = merge_position_deletes(target(sqlite_catalog), table, plan, max_bytes=1, keep_going=stop)
    assert result.commits == 1 and result.stopped_early and asked[0] == 1
    _, result = merge_position_deletes(
        target(sqlite_catalog),
        load(sqlite_catalog),
        plan_delete_merges(load(sqlite_catalog), target(sqlite_catalog)),
        max_bytes=1,
    )
    assert result.commits == 3
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()
