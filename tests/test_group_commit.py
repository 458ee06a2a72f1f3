"""A job's checkpoints committed across several tables in one catalog transaction (driven without Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.manifest import ManifestFile, read_manifest_list

from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.errors import ManifestError
from icesink.iceberg.manifest_lists import is_kept, manifests_of
from icesink.iceberg.marker import committed_marker
from icesink.properties import COMMIT_ID_PROPERTY
from tests.helpers.support import create_orders_table, orders, pointers, stage_group, staged_in_manifests, table_ids

TABLES = ("shop.orders", "shop.order lines", "shop.façade%/x")


def marker_of(config: CatalogConfig, identifier: str, job_id: str = "job") -> int | None:
    marker = committed_marker(open_catalog(config).load_table(identifier).metadata, job_id)
    return marker.checkpoint_id if marker else None


@pytest.fixture
def three_tables(catalog_config: CatalogConfig) -> CatalogConfig:
    for identifier in TABLES:
        create_orders_table(catalog_config, identifier)
    return catalog_config


def test_one_checkpoint_moves_every_table_it_touched_in_one_commit(three_tables: CatalogConfig) -> None:
    config = three_tables
    assert stage_group(config, "job", 0, {TABLES[0]: orders(0, 3), TABLES[1]: orders(10, 2), TABLES[2]: None})
    assert stage_group(config, "job", 1, {TABLES[0]: orders(3, 1), TABLES[1]: None, TABLES[2]: orders(20, 4)})
    before = pointers(config)
    outcomes = TableCommitter.of(config).commit_pending(TABLES[1])  # any table of the job commits all of them
    assert all(pointers(config)[t] != before[t] for t in TABLES)
    assert table_ids(config, TABLES[0]) == [0, 1, 2, 3]
    assert table_ids(config, TABLES[1]) == [10, 11]
    assert table_ids(config, TABLES[2]) == [20, 21, 22, 23]
    # Appends commute: both checkpoints went in one transaction, one snapshot per table.
    catalog = open_catalog(config)
    commit_ids = set()
    for identifier in TABLES:
        table = catalog.load_table(identifier)
        assert len(table.metadata.snapshots) == 1
        commit_ids.add(table.current_snapshot().summary[COMMIT_ID_PROPERTY])
    assert len(commit_ids) == 1
    assert {o.identifier: o.checkpoint_ids for o in outcomes} == {
        TABLES[0]: (0, 1),
        TABLES[1]: (0,),
        TABLES[2]: (1,),
    }
    assert [marker_of(config, t) for t in TABLES] == [1, 0, 1]
    rows = [r for t in TABLES for r in Ledger(config).for_table(t)]
    assert {r.state for r in rows} == {CheckpointState.COMMITTED}
    assert {r.commit_id for r in rows if r.manifests.present()} == commit_ids
    assert all(r.manifests_deleted for r in rows)


def test_a_table_the_checkpoint_did_not_touch_keeps_its_snapshot(three_tables: CatalogConfig) -> None:
    config = three_tables
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 1), TABLES[1]: orders(1, 1)})
    TableCommitter.of(config).commit_pending(TABLES[0])
    before = pointers(config)
    stage_group(config, "job", 1, {TABLES[0]: orders(2, 1), TABLES[1]: None})
    TableCommitter.of(config).commit_pending(TABLES[0])
    after = pointers(config)
    assert after[TABLES[0]] != before[TABLES[0]]
    assert after[TABLES[1]] == before[TABLES[1]]
    assert after[TABLES[2]] == before[TABLES[2]]  # never part of the job


def test_a_table_that_cannot_commit_holds_the_group_and_the_error_names_it(three_tables: CatalogConfig) -> None:
    config = three_tables
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 1), TABLES[1]: orders(1, 1)})
    stage_group(config, "job", 1, {TABLES[0]: orders(2, 1), TABLES[1]: orders(3, 1)})
    broken = staged_in_manifests(config, TABLES[1], "job", 1)  # as a release before staged it
    Path(broken.manifests.data.path.removeprefix("file://")).unlink()
    with pytest.raises(ManifestError, match=f"table {TABLES[1]}, job job, checkpoint 1"):
        TableCommitter.of(config).commit_pending(TABLES[0])
    # Checkpoint 0 could commit everywhere, and did; checkpoint 1 moved no table.
    assert [marker_of(config, t) for t in TABLES[:2]] == [0, 0]
    assert table_ids(config, TABLES[0]) == [0]
    assert table_ids(config, TABLES[1]) == [1]
    pending = Ledger(config).pending(TABLES[0]) + Ledger(config).pending(TABLES[1])
    assert [(r.identifier, r.checkpoint_id, r.status) for r in pending] == [
        (TABLES[0], 1, "staged"),
        (TABLES[1], 1, "failed"),
    ]


def test_another_writer_moving_one_table_sends_the_whole_group_back(three_tables: CatalogConfig) -> None:
    """The swap of a group whose table moved since it was read is refused as a whole, then rebuilt once."""
    config = three_tables
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 2), TABLES[1]: orders(10, 2)})
    interfered = []

    def another_writer() -> None:
        if not interfered:
            interfered.append(True)
            open_catalog(config).load_table(TABLES[1]).append(orders(99, 1))

    committer = TableCommitter.of(config, before_commit=another_writer)
    committer.commit_pending(TABLES[0])
    assert interfered
    assert table_ids(config, TABLES[0]) == [0, 1]
    assert table_ids(config, TABLES[1]) == [10, 11, 99]
    assert [marker_of(config, t) for t in TABLES[:2]] == [0, 0]


def test_a_checkpoint_staged_for_several_tables_is_staged_once(three_tables: CatalogConfig) -> None:
    """Staging all tables' rows is one transaction: a replay stages nothing and leaves no manifest behind."""
    config = three_tables
    assert stage_group(config, "job", 0, {TABLES[0]: orders(0, 1), TABLES[1]: orders(1, 1)})
    metadata = Path(open_catalog(config).load_table(TABLES[0]).location().removeprefix("file://")) / "metadata"
    manifests_before = sorted(metadata.glob("icesink-*"))
    assert not stage_group(config, "job", 0, {TABLES[0]: orders(5, 1), TABLES[1]: orders(6, 1)})
    assert sorted(metadata.glob("icesink-*")) == manifests_before
    assert len(Ledger(config).pending(TABLES[0])) == 1
    assert len(Ledger(config).pending(TABLES[1])) == 1


def test_tables_committed_independently_when_not_atomic(three_tables: CatalogConfig) -> None:
    config = three_tables
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 1), TABLES[1]: orders(1, 1)}, atomic=False)
    TableCommitter.of(config).commit_pending(TABLES[0])
    assert table_ids(config, TABLES[0]) == [0]
    assert table_ids(config, TABLES[1]) == []
    summary = open_catalog(config).load_table(TABLES[0]).current_snapshot().summary
    assert COMMIT_ID_PROPERTY not in summary.additional_properties
    assert "icesink.job-id" in summary.additional_properties


def three_checkpoints_and_another_writer(config: CatalogConfig) -> None:
    """Checkpoints 0-2 of job "job" into tables a and b (b untouched by 1), another writer on a after 1."""
    a, b = TABLES[0], TABLES[1]
    committer = TableCommitter.of(config)
    for checkpoint, rows in enumerate([{a: orders(0, 2), b: orders(10, 1)}, {a: orders(2, 1), b: None}]):
        stage_group(config, "job", checkpoint, rows)
        committer.commit_pending(a)
    open_catalog(config).load_table(a).append(orders(99, 1))  # another writer, after checkpoint 1
    stage_group(config, "job", 2, {a: orders(3, 1), b: orders(11, 1)})
    committer.commit_pending(a)


def test_read_tables_gives_one_consistent_cut_now_or_at_a_checkpoint(three_tables: CatalogConfig) -> None:
    import icesink
    from icesink.errors import CheckpointNotCommittedError, ConfigError, SnapshotNotFoundError, TableNotFoundError

    config = three_tables
    a, b = TABLES[0], TABLES[1]
    three_checkpoints_and_another_writer(config)

    def ids(cut: dict[str, object]) -> dict[str, list[int]]:
        return {t: sorted(rows.column("id").to_pylist()) for t, rows in cut.items()}  # type: ignore[attr-defined]

    now = icesink.read_tables([a, b], catalog=config)
    assert list(now) == [a, b]
    assert ids(now) == {a: [0, 1, 2, 3, 99], b: [10, 11]}
    assert ids(icesink.read_tables([a, b], job_id="job", checkpoint_id=0, catalog=config)) == {a: [0, 1], b: [10]}
    # After checkpoint 1: the other writer's snapshot holds no later checkpoint of the job, so it is in.
    assert ids(icesink.read_tables([a, b], job_id="job", checkpoint_id=1, catalog=config)) == {
        a: [0, 1, 2, 99],
        b: [10],
    }
    assert ids(icesink.read_tables([b], job_id="job", checkpoint_id=-1, catalog=config)) == {b: []}

    stage_group(config, "job", 3, {a: None, b: orders(12, 1)})  # staged, not committed
    with pytest.raises(CheckpointNotCommittedError, match=f"table {b}: checkpoint 3 of job job is staged"):
        icesink.read_tables([a, b], job_id="job", checkpoint_id=3, catalog=config)
    assert ids(icesink.read_tables([a, b], job_id="job", checkpoint_id=2, catalog=config))[b] == [10, 11]

    table = open_catalog(config).load_table(b)
    table.maintenance.expire_snapshots().by_id(table.metadata.snapshots[0].snapshot_id).commit()
    with pytest.raises(SnapshotNotFoundError, match=f"table {b}: the snapshots holding checkpoint 0 of job job"):
        icesink.read_tables([a, b], job_id="job", checkpoint_id=0, catalog=config)
    with pytest.raises(TableNotFoundError, match=r"'shop\.nope'"):
        icesink.read_tables([a, "shop.nope"], catalog=config)
    with pytest.raises(ConfigError, match="job_id and checkpoint_id together"):
        icesink.read_tables([a], checkpoint_id=1, catalog=config)
    with pytest.raises(ConfigError, match="a list of tables is needed, not the string"):
        icesink.read_tables(a, catalog=config)
    with pytest.raises(ConfigError, match="job nobody has written none of the tables"):
        icesink.read_tables([a, b], job_id="nobody", checkpoint_id=0, catalog=config)
    with pytest.raises(CheckpointNotCommittedError, match="job job has not reached checkpoint 99 \\(its last is 3\\)"):
        icesink.read_tables([a], job_id="job", checkpoint_id=99, catalog=config)
    with pytest.raises(ConfigError, match="checkpoint_id is a checkpoint number \\(an int\\), not '0'"):
        icesink.read_tables([a], job_id="job", checkpoint_id="0", catalog=config)  # type: ignore[arg-type]
    assert list(icesink.read_tables((t for t in [b, a]), catalog=config)) == [b, a]


def test_operators_see_a_many_table_stream_as_one_job_with_its_tables(three_tables: CatalogConfig) -> None:
    """`jobs list`, `checkpoints list`, `snapshots list` and /healthz, for an atomic job held back by one table."""
    import json
    import threading
    import time

    from icesink.committer.daemon import CommitterDaemon
    from icesink.committer.observability import StatusServer
    from tests.test_cli import invoke
    from tests.test_daemon import get

    config = three_tables
    a, b = TABLES[0], TABLES[1]
    stage_group(config, "many", 0, {a: orders(0, 1), b: orders(1, 1)})
    stage_group(config, "many", 1, {a: orders(2, 1), b: orders(3, 1)})
    stage_group(config, "single", 0, {TABLES[2]: orders(9, 1)}, atomic=False)
    broken = staged_in_manifests(config, b, "many", 1)  # as a release before staged it
    Path(broken.manifests.data.path.removeprefix("file://")).unlink()
    code, output = invoke(config, "committer", "run", "--once")
    assert code != 0 and f"table {b}, job many, checkpoint 1" in output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"it also holds back {a}" in errors[0]  # one error, said once
    code, text = invoke(config, "checkpoints", "list", a)
    assert f"job many: waits for checkpoint 1 of table {b}" in text

    code, output = invoke(config, "jobs", "list", "--json")
    assert code == 0
    jobs = {j["job_id"]: j for j in json.loads(output)}
    assert jobs["many"]["atomic"] is True and jobs["many"]["tables"] == {a: 0, b: 0}
    assert jobs["many"]["pending"] == 2 and jobs["many"]["failed"] == 1
    assert jobs["single"]["atomic"] is False and jobs["single"]["tables"] == {TABLES[2]: 0}
    code, text = invoke(config, "jobs", "list")
    assert code == 0 and "job many:" in text and b in text

    commit_id = next(r.commit_id for r in Ledger(config).for_table(a) if r.checkpoint_id == 0)
    assert commit_id
    code, output = invoke(config, "checkpoints", "list", a, "--json")
    assert [c["commit_id"] for c in json.loads(output)["checkpoints"]] == [commit_id, None]
    code, text = invoke(config, "snapshots", "list", b)
    assert code == 0 and commit_id[:8] in text

    daemon = CommitterDaemon(config, poll_interval=0.1, lease_ttl=5)
    server = StatusServer("127.0.0.1", 0, daemon.metrics, daemon.problems, daemon.jobs)
    server.start()
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and get(f"http://127.0.0.1:{server.port}/healthz")[0] != 503:
            time.sleep(0.1)
        status, body = get(f"http://127.0.0.1:{server.port}/healthz")
        health = json.loads(body)
        assert status == 503 and any("checkpoint 1" in p for p in health["problems"])
        many = next(j for j in health["jobs"] if j["job_id"] == "many")
        assert many["tables"] == {a: 0, b: 0} and many["atomic"] is True
    finally:
        daemon.stop()
        runner.join(30)
        server.stop()


def test_a_committer_limited_to_some_tables_refuses_a_group_reaching_beyond_them(three_tables: CatalogConfig) -> None:
    from tests.test_cli import invoke

    config = three_tables
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 1), TABLES[1]: orders(1, 1)})
    before = pointers(config)
    code, output = invoke(config, "committer", "run", "--once", "--table", TABLES[0])
    assert code != 0
    assert f"job job commits tables {TABLES[1]}, {TABLES[0]} together" in output
    assert f"also has {TABLES[1]}" in output
    assert pointers(config) == before
    code, _ = invoke(config, "committer", "run", "--once", "--table", TABLES[0], "--table", TABLES[1])
    assert code == 0
    assert table_ids(config, TABLES[0]) == [0] and table_ids(config, TABLES[1]) == [1]


def test_a_checkpoint_that_would_stage_one_table_twice_stages_nothing(three_tables: CatalogConfig) -> None:
    from icesink.committer.staging import TableResults, stage_tables
    from icesink.errors import ConfigError
    from tests.helpers.support import write_files

    config = three_tables
    table = open_catalog(config).load_table(TABLES[0])
    written = [TableResults(table, TABLES[0], [write_files(table, TABLES[0], "job", 0, orders(i, 1))]) for i in (0, 1)]
    with pytest.raises(ConfigError, match=f"table {TABLES[0]}: checkpoint 0 of job job would stage it twice"):
        stage_tables(Ledger(config), "job", 0, written, atomic=True)
    assert Ledger(config).pending(TABLES[0]) == []


def test_changes_of_several_tables_between_two_checkpoints_of_a_job(three_tables: CatalogConfig) -> None:
    import icesink
    from icesink.errors import CheckpointNotCommittedError, ConfigError

    config = three_tables
    a, b = TABLES[0], TABLES[1]
    three_checkpoints_and_another_writer(config)

    def inserted(found: dict[str, object]) -> dict[str, list[int]]:
        out = {}
        for t, rows in found.items():
            kinds = rows.column("_change_type").to_pylist()  # type: ignore[attr-defined]
            assert set(kinds) <= {"insert"}
            out[t] = sorted(rows.column("id").to_pylist())  # type: ignore[attr-defined]
        return out

    everything = icesink.changes_of_tables([a, b], "job", to_checkpoint=2, catalog=config)
    assert inserted(everything) == {a: [0, 1, 2, 3, 99], b: [10, 11]}
    assert inserted(icesink.changes_of_tables([a, b], "job", 0, catalog=config)) == {a: [0, 1], b: [10]}
    # After checkpoint 0 up to 1: b had nothing; the other writer's row came after checkpoint 1.
    assert inserted(icesink.changes_of_tables([a, b], "job", 1, from_checkpoint=0, catalog=config)) == {
        a: [2, 99],
        b: [],
    }
    assert inserted(icesink.changes_of_tables([a, b], "job", 2, from_checkpoint=1, catalog=config)) == {a: [3], b: [11]}
    with pytest.raises(CheckpointNotCommittedError, match="has not reached checkpoint 5"):
        icesink.changes_of_tables([a, b], "job", 5, catalog=config)
    with pytest.raises(ConfigError, match="from_checkpoint 2 is after to_checkpoint 1"):
        icesink.changes_of_tables([a, b], "job", 1, from_checkpoint=2, catalog=config)


def _stage_changes(
    config: CatalogConfig, job: str, checkpoint: int, per_table: dict[str, tuple[object, list[str]]]
) -> None:
    """Stage one atomic checkpoint of keyed changes (rows, ops) per table, as a change stream's tasks write them."""
    import pyarrow as pa

    from icesink.committer.staging import TableResults, stage_tables
    from icesink.iceberg.describe import writer_spec
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter

    catalog = open_catalog(config)
    written = []
    for identifier, (rows, ops) in per_table.items():
        table = catalog.load_table(identifier)
        changes = rows.append_column("op", pa.array(ops)).append_column(  # type: ignore[attr-defined]
            "__icesink_order", pa.array(range(len(ops)), pa.int64())
        )
        spec = writer_spec(table, identifier, job, ChangeSpec((1,), op_column="op")).for_checkpoint(checkpoint)
        writer = TaskWriter(spec, 0, 0)
        writer.write(changes)
        written.append(TableResults(table, identifier, [writer.complete()]))
    assert stage_tables(Ledger(config), job, checkpoint, written, atomic=True)


def test_deletes_of_absent_keys_survive_a_group_rebuilt_after_a_conflict(three_tables: CatalogConfig) -> None:
    """A table whose checkpoint only deletes keys it never held needs no snapshot; its delete files must stay
    until the group is committed, since a conflict elsewhere makes the group prepare it again."""
    import icesink

    config = three_tables
    a, b = TABLES[0], TABLES[1]
    stage_group(config, "job", 0, {a: orders(0, 2), b: orders(10, 1)})
    TableCommitter.of(config).commit_pending(a)
    _stage_changes(config, "job", 1, {a: (orders(500, 1), ["D"]), b: (orders(11, 1), ["I"])})
    (row,) = [r for r in Ledger(config).pending(a)]
    interfered = []

    def another_writer() -> None:
        if not interfered:
            interfered.append(True)
            open_catalog(config).load_table(b).append(orders(99, 1))

    committer = TableCommitter.of(config, before_commit=another_writer)
    committer.commit_pending(a)
    assert interfered
    assert sorted(icesink.read(a, catalog=config).column("id").to_pylist()) == [0, 1]
    assert sorted(icesink.read(b, catalog=config).column("id").to_pylist()) == [10, 11, 99]
    table = open_catalog(config).load_table(a)
    assert len(table.metadata.snapshots) == 1  # the deletes named no row: no snapshot
    assert [r.state for r in Ledger(config).for_table(a)] == [CheckpointState.COMMITTED] * 2
    assert sorted(table_ids(config, a)) == [0, 1]  # pyiceberg reads it: no file the table names is missing
    assert row.manifests.delete_files == 1


def test_a_job_switching_from_one_table_to_several_commits_its_older_checkpoints_first(
    three_tables: CatalogConfig,
) -> None:
    config = three_tables
    a, b = TABLES[0], TABLES[1]
    for checkpoint in (0, 1):  # a single-table stream's checkpoints, not committed yet
        stage_group(config, "job", checkpoint, {a: orders(checkpoint * 10, 1)}, atomic=False)
    stage_group(config, "job", 2, {a: orders(20, 1), b: orders(30, 1)})  # restarted to write two tables
    TableCommitter.of(config).commit_pending(b)
    assert table_ids(config, a) == [0, 10, 20]
    assert table_ids(config, b) == [30]
    assert {r.state for t in (a, b) for r in Ledger(config).for_table(t)} == {CheckpointState.COMMITTED}


def test_a_checkpoint_discarded_while_its_group_commits_is_left_out(three_tables: CatalogConfig) -> None:
    config = three_tables
    a, b = TABLES[0], TABLES[1]
    stage_group(config, "job", 0, {a: orders(0, 1), b: orders(10, 1)})
    (row_b,) = Ledger(config).pending(b)
    discarded = []

    def operator_discards() -> None:
        if not discarded:
            discarded.append(Ledger(config).discard(row_b.id, "operator", "bad data"))

    committer = TableCommitter.of(config, before_commit=operator_discards)
    committer.commit_pending(a)
    assert discarded == [True]
    assert table_ids(config, a) == [0]
    assert table_ids(config, b) == []  # discarded before the commit could name it
    assert [r.state for r in Ledger(config).for_table(b)] == [CheckpointState.DISCARDED]


def job_around_another_writer(config: CatalogConfig, before: tuple[int, ...], after: int) -> None:
    """The job's checkpoints ``before`` into the first table, another writer's snapshot (row 99), then the job's
    checkpoint ``after``."""
    committer = TableCommitter.of(config)
    for checkpoint in before:
        stage_group(config, "job", checkpoint, {TABLES[0]: orders(checkpoint, 1)})
        committer.commit_pending(TABLES[0])
    open_catalog(config).load_table(TABLES[0]).append(orders(99, 1))  # maintenance or another tool
    stage_group(config, "job", after, {TABLES[0]: orders(after, 1)})
    committer.commit_pending(TABLES[0])


def test_a_checkpoint_whose_history_was_expired_below_another_writers_snapshot_is_refused(
    three_tables: CatalogConfig,
) -> None:
    import icesink
    from icesink.errors import SnapshotNotFoundError

    config = three_tables
    a = TABLES[0]
    job_around_another_writer(config, (3, 5), 7)
    table = open_catalog(config).load_table(a)
    for snapshot in table.metadata.snapshots[:2]:  # the job's snapshots of checkpoints 3 and 5
        table = open_catalog(config).load_table(a)
        table.maintenance.expire_snapshots().by_id(snapshot.snapshot_id).commit()
    with pytest.raises(SnapshotNotFoundError, match="the snapshots holding checkpoint 4 of job job were expired"):
        icesink.read_tables([a], job_id="job", checkpoint_id=4, catalog=config)
    assert sorted(
        icesink.read_tables([a], job_id="job", checkpoint_id=7, catalog=config)[a].column("id").to_pylist()
    ) == [3, 5, 7, 99]


def test_a_checkpoint_just_below_the_next_one_kept_is_read_however_much_history_below_was_expired(
    three_tables: CatalogConfig,
) -> None:
    """The job's snapshot of checkpoint 5 sits on another writer's snapshot whose history was expired: every
    commit of the job below it held checkpoint 4 or less, so that snapshot is the state at checkpoint 4."""
    import icesink

    config = three_tables
    a = TABLES[0]
    job_around_another_writer(config, (3, 4), 5)
    table = open_catalog(config).load_table(a)
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in table.metadata.snapshots[:2]]).commit()
    assert len(open_catalog(config).load_table(a).metadata.snapshots) == 2
    cut = icesink.read_tables([a], job_id="job", checkpoint_id=4, catalog=config)
    assert sorted(cut[a].column("id").to_pylist()) == [3, 4, 99]  # before, refused as expired


def test_the_manifest_lists_a_commit_keeps_are_what_their_files_hold(three_tables: CatalogConfig) -> None:
    """The committer keeps each manifest list it writes rather than reading it back at the next commit: what it
    keeps must be what a reader of the file gets, new manifests' sequence numbers included."""
    config = three_tables
    for checkpoint in range(3):
        assert stage_group(config, "job", checkpoint, {t: orders(checkpoint * 10, 2) for t in TABLES})
        TableCommitter.of(config).commit_pending(TABLES[0])
    catalog = open_catalog(config)
    for identifier in TABLES:
        table = catalog.load_table(identifier)
        for snapshot in table.metadata.snapshots:
            assert is_kept(snapshot.manifest_list)  # written by this process: never read back
            kept = manifests_of(table.io, snapshot)
            read = list(read_manifest_list(table.io.new_input(snapshot.manifest_list)))
            # Field by field (a manifest's == compares its path alone).
            assert len(read) >= 1 and [_fields(m) for m in kept] == [_fields(m) for m in read]
            assert all(
                m.sequence_number == snapshot.sequence_number
                for m in kept
                if m.added_snapshot_id == snapshot.snapshot_id
            )


def test_each_table_of_a_group_names_its_own_discarded_checkpoints(three_tables: CatalogConfig) -> None:
    """A group commit reads the discards of all its tables at once: each table's summary names its own."""
    config = three_tables
    a, b, c = TABLES
    stage_group(config, "job", 0, {a: orders(0, 1), b: orders(10, 1), c: orders(20, 1)})
    stage_group(config, "job", 1, {a: orders(1, 1), b: orders(11, 1), c: orders(21, 1)})
    ledger = Ledger(config)
    assert ledger.discard(ledger.get(b, "job", 0).id, "operator", "bad data")
    assert ledger.discard(ledger.get(c, "job", 0).id, "operator", "bad data")
    stage_group(config, "job", 2, {a: orders(2, 1), b: orders(12, 1), c: orders(22, 1)})
    assert ledger.discard(ledger.get(c, "job", 2).id, "operator", "not yet: a later checkpoint names it")
    TableCommitter.of(config).commit_pending(a)
    catalog = open_catalog(config)
    summaries = {t: catalog.load_table(t).current_snapshot().summary for t in TABLES}
    assert "icesink.discarded-checkpoints" not in summaries[a].additional_properties
    assert summaries[b]["icesink.discarded-checkpoints"] == "0"
    assert summaries[c]["icesink.discarded-checkpoints"] == "0"
    assert table_ids(config, a) == [0, 1, 2] and table_ids(config, b) == [11, 12] and table_ids(config, c) == [21]


def _fields(manifest: ManifestFile) -> tuple[object, ...]:
    return tuple(
        getattr(manifest, name)
        for name in (
            "manifest_path",
            "manifest_length",
            "partition_spec_id",
            "content",
            "sequence_number",
            "min_sequence_number",
            "added_snapshot_id",
            "added_files_count",
            "existing_files_count",
            "deleted_files_count",
            "added_rows_count",
            "existing_rows_count",
            "deleted_rows_count",
            "key_metadata",
        )
    ) + tuple((p.contains_null, p.contains_nan, p.lower_bound, p.upper_bound) for p in (manifest.partitions or []))


def test_a_backlog_of_group_commits_reads_each_checkpoints_files_once(
    three_tables: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keyed checkpoints commit one snapshot each: a committer catching up reads the pending rows again after each
    commit, but decodes each row's staged files once (not once per remaining commit), and a checkpoint staged
    while it commits is read with its files too."""
    from icesink.catalog.checkpoints import StagedFiles

    config = three_tables
    a, b = TABLES[0], TABLES[1]
    for checkpoint in range(4):  # an update of key 1 in each: a snapshot per checkpoint
        ops = ["I", "U"] if checkpoint else ["I", "I"]
        _stage_changes(config, "job", checkpoint, {a: (orders(checkpoint, 2), ops), b: (orders(10, 1), ["U"])})
    decoded: list[int] = []
    original = StagedFiles.decode

    def counted(text: str) -> StagedFiles:
        decoded.append(1)
        return original(text)

    monkeypatch.setattr(StagedFiles, "decode", staticmethod(counted))
    committer = TableCommitter.of(config)
    staged_late = []

    def stage_one_more(*args: object, **kwargs: object) -> None:  # another micro-batch staged meanwhile
        if not staged_late:
            staged_late.append(4)
            _stage_changes(config, "job", 4, {a: (orders(50, 1), ["I"]), b: (orders(60, 1), ["I"])})

    monkeypatch.setattr(
        Ledger, "mark_cleaned", lambda self, ids, real=Ledger.mark_cleaned: (real(self, ids), stage_one_more())
    )
    outcomes = committer.commit_atomic("job")
    assert sorted({c for o in outcomes for c in o.checkpoint_ids}) == [0, 1, 2, 3, 4]
    assert sum(decoded) == 10  # 5 checkpoints x 2 tables, each once
    assert table_ids(config, a) == [0, 1, 2, 3, 4, 50]
    assert table_ids(config, b) == [10, 60]
    assert [marker_of(config, t) for t in (a, b)] == [4, 4]
