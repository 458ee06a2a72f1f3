"""Maintenance: equality deletes become position deletes, small files are compacted, nothing changes rows.

Checkpoints are written by the executors' own task writer and committed by
the committer, as a stream would; races are made exact by committing another
checkpoint from inside a maintenance run's last moment before its
compare-and-swap. Every end state is read by icesink, pyiceberg's own scan
and iceberg-rust, and compared with a plain-Python model.
"""

from __future__ import annotations

import datetime
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.gc import collect_garbage
from icesink.committer.maintainer import Maintainer
from icesink.committer.staging import stage_checkpoint
from icesink.iceberg.describe import writer_spec
from icesink.iceberg.marker import committed_marker
from icesink.iceberg.scan import live_files
from icesink.maintenance.committing import MaintenanceTarget
from icesink.maintenance.compact import compact, plan_compaction
from icesink.maintenance.convert import convert_equality_deletes
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceRequest
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter
from tests.helpers.outcomes import check_outcome, iceberg_rust_sql

TABLE = "shop.kv"
KEEP = {"icesink.equality-deletes.convert-at-commit": "false"}
ROOT = Path(__file__).parent.parent


class Model:
    """The table's expected state: key -> value."""

    def __init__(self) -> None:
        self.rows: dict[int, str] = {}

    def apply(self, changes: list[tuple[int, str, str]]) -> None:
        for key, value, op in changes:
            if op == "D":
                self.rows.pop(key, None)
            else:
                self.rows[key] = value

    def expected(self) -> list[tuple[int, str]]:
        return sorted(self.rows.items())


def create(
    config: CatalogConfig,
    properties: dict[str, str] | None = None,
    partition_by: tuple[str, ...] = (),
    identifier: str = TABLE,
) -> Any:
    """A keyed table (id, v) in namespace ``shop``."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from icesink.sink.tables import parse_partition_by

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType(), required=False),
        identifier_field_ids=[1],
    )
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("shop")
    spec = parse_partition_by(identifier, schema, partition_by)
    return catalog.create_table(identifier, schema, partition_spec=spec, properties=properties or {})


def random_changes(rng: random.Random, checkpoint: int, keys: int = 120, size: int = 60) -> list[tuple[int, str, str]]:
    return [(rng.randrange(keys), f"v{checkpoint}-{n}", rng.choice("IUUD")) for n in range(size)]


def commit_changes(
    config: CatalogConfig, checkpoint: int, changes: list[tuple[int, str, str]], job: str = "cdc", commit: bool = True
) -> None:
    """Write, stage and commit one checkpoint of changes, as a stream with the inline committer does (with
    ``commit=False``, leave it staged)."""
    catalog = open_catalog(config)
    table = catalog.load_table(TABLE)
    spec = writer_spec(table, TABLE, job, ChangeSpec(equality_field_ids=(1,), op_column="op")).for_checkpoint(
        checkpoint
    )
    writer = TaskWriter(spec, 0, 0)
    writer.write(
        pa.table(
            {
                "id": pa.array([c[0] for c in changes], pa.int64()),
                "v": [c[1] for c in changes],
                "op": [c[2] for c in changes],
                "__icesink_order": pa.array(range(len(changes)), pa.int64()),
            }
        )
    )
    stage_checkpoint(Ledger(config), table, TABLE, job, checkpoint, [writer.complete()])
    if commit:
        TableCommitter.of(config).commit_pending(TABLE)


def rows_by_every_reader(config: CatalogConfig) -> list[list[tuple[int, str]]]:
    """icesink.read, pyiceberg's scan (when no equality delete is left) and iceberg-rust."""
    table = open_catalog(config).load_table(TABLE)

    def pairs(t: pa.Table) -> list[tuple[int, str]]:
        return sorted((r["id"], r["v"]) for r in t.to_pylist())

    found = [pairs(icesink.read(table)), pairs(iceberg_rust_sql(table, "SELECT id, v FROM t"))]
    if not live_files(table).equality_deletes:
        found.append(pairs(table.scan().to_arrow()))
    return found


def target(config: CatalogConfig, before_commit: Callable[[], None] | None = None) -> MaintenanceTarget:
    return MaintenanceTarget(open_catalog(config), config, TABLE, before_commit)


def fill(config: CatalogConfig, checkpoints: int, seed: int = 1, properties: dict[str, str] | None = None) -> Model:
    create(config, properties)
    rng = random.Random(seed)
    model = Model()
    for checkpoint in range(checkpoints):
        changes = random_changes(rng, checkpoint)
        commit_changes(config, checkpoint, changes)
        model.apply(changes)
    return model


def test_equality_deletes_become_position_deletes_and_pyiceberg_reads_the_table(catalog_config: CatalogConfig) -> None:
    model = fill(catalog_config, 5, properties=KEEP)
    table = open_catalog(catalog_config).load_table(TABLE)
    assert len(live_files(table).equality_deletes) == 5
    with pytest.raises(ValueError, match="equality deletes"):  # what a pyiceberg user sees before
        table.scan().to_arrow()
    marker = committed_marker(table.metadata, "cdc")
    result = convert_equality_deletes(target(catalog_config), table)
    assert result.conflict is None and result.equality_delete_files == 5 and result.position_delete_files == 1
    table = open_catalog(catalog_config).load_table(TABLE)
    live = live_files(table)
    assert live.equality_deletes == [] and len(live.position_deletes) == 1
    # The position deletes keep the newest replaced equality delete's sequence number.
    assert live.position_deletes[0].sequence_number == 5
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation.value == "delete"
    assert snapshot.summary["icesink.maintenance"] == "convert-equality-deletes"
    assert snapshot.summary["icesink.job-id"] is None and committed_marker(table.metadata, "cdc") == marker
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()


def test_a_checkpoint_whose_conversion_fails_is_committed_with_its_equality_deletes(
    sqlite_catalog: CatalogConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """Keyed on top-level columns, equality deletes are as correct as position deletes, only slower to read."""
    model = fill(sqlite_catalog, 2)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert live_files(table).equality_deletes == []  # converted at commit so far
    stored = [Path(str(f.file.file_path).removeprefix("file://")) for f in live_files(table).data]
    for path in stored:
        path.rename(path.with_name(f"away-{path.name}"))
    changes = random_changes(random.Random(9), 2)
    commit_changes(sqlite_catalog, 2, changes)  # no error: the deletes stay equality deletes
    model.apply(changes)
    assert "equality deletes kept, converting them failed" in caplog.text and "checkpoint=2" in caplog.text
    for path in stored:
        path.with_name(f"away-{path.name}").rename(path)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert len(live_files(table).equality_deletes) == 1
    assert committed_marker(table.metadata, "cdc").checkpoint_id == 2
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_position_delete_files_naming_one_data_file_say_which_in_their_manifest(sqlite_catalog: CatalogConfig) -> None:
    import pyarrow.parquet as pq

    from icesink.iceberg.manifests import read_delta_manifest, referenced_data_file, to_data_file, write_delta_manifest
    from icesink.writer.position_deletes import write_position_deletes

    model = fill(sqlite_catalog, 6)  # converted at commit: one position delete file per checkpoint
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    live = live_files(table)
    data = [str(f.file.file_path) for f in live.data]
    base = f"{table.location()}/data/positions"
    one = write_position_deletes(f"{base}-one.parquet", {data[0]: pa.array([0, 1])}, 0, ())
    several = write_position_deletes(f"{base}-two.parquet", {d: pa.array([0]) for d in [*data, "x://other"]}, 0, ())
    staged = [to_data_file(r, 2) for r in (one, several)]
    path = f"{table.location()}/metadata/positions.avro"
    manifest = write_delta_manifest(table.metadata, table.io, path, 0, staged, deletes=True)
    assert [referenced_data_file(f) for f in read_delta_manifest(table.io, manifest)] == [data[0], None]
    # What the committer wrote says the same as the files' own rows, and every reader applies them.
    assert live.position_deletes
    for delete in live.position_deletes:
        named = set(pq.read_table(str(delete.file.file_path).removeprefix("file://")).column("file_path").to_pylist())
        assert referenced_data_file(delete.file) == (named.pop() if len(named) == 1 else None)
    assert any(referenced_data_file(d.file) for d in live.position_deletes)
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_compaction_rewrites_small_files_with_their_deletes_at_the_base_sequence_number(
    sqlite_catalog: CatalogConfig,
) -> None:
    model = fill(sqlite_catalog, 6)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    before = live_files(table)
    assert len(before.data) == 6 and len(before.position_deletes) >= 4
    plan = plan_compaction(table, MaintenancePolicy())
    assert len(plan.groups) == 1 and plan.files == 6
    table, result = compact(target(sqlite_catalog), table, plan)
    assert result.groups_committed == 1 and result.files_written == 1
    after = live_files(table)
    assert len(after.data) == 1 and after.position_deletes == [] and after.equality_deletes == []
    assert after.data[0].sequence_number == plan.base_sequence_number
    assert after.data[0].file.record_count == len(model.rows)
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation.value == "replace" and snapshot.summary["icesink.maintenance"] == "compact"
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()
    # gc keeps what older snapshots still read; the table reads the same after it.
    collect_garbage(open_catalog(sqlite_catalog), sqlite_catalog, TABLE, datetime.timedelta(0))
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_an_equality_delete_committed_during_compaction_still_applies_to_the_rewritten_rows(
    sqlite_catalog: CatalogConfig,
) -> None:
    """The new files keep the base's sequence number, so the later upsert's delete reaches them."""
    model = fill(sqlite_catalog, 4, properties=KEEP)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    plan = plan_compaction(table, MaintenancePolicy(), everything=True)
    key = next(iter(model.rows))
    raced = [False]

    def upsert_meanwhile() -> None:
        if not raced[0]:
            raced[0] = True
            commit_changes(sqlite_catalog, 100, [(key, "updated during compaction", "U")])

    table, result = compact(target(sqlite_catalog, upsert_meanwhile), table, plan)
    model.apply([(key, "updated during compaction", "U")])
    assert raced[0] and result.groups_committed == 1 and result.groups_failed == []
    assert table.current_snapshot().summary["icesink.maintenance"] == "compact"  # built on the moved head
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_position_delete_committed_during_compaction_fails_the_group_and_a_later_run_retries_it(
    sqlite_catalog: CatalogConfig,
) -> None:
    model = fill(sqlite_catalog, 4)  # position deletes: the committer converts at commit time
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    plan = plan_compaction(table, MaintenancePolicy(), everything=True)
    key = next(iter(model.rows))
    raced = [False]

    def delete_meanwhile() -> None:
        if not raced[0]:
            raced[0] = True
            commit_changes(sqlite_catalog, 100, [(key, "", "D")])

    table, result = compact(target(sqlite_catalog, delete_meanwhile), table, plan)
    model.apply([(key, "", "D")])
    assert raced[0] and result.groups_committed == 0
    assert "position delete" in result.groups_failed[0]
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()  # the delete is in, nothing was lost
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    table, retried = compact(
        target(sqlite_catalog), table, plan_compaction(table, MaintenancePolicy(), everything=True)
    )
    assert retried.groups_committed == 1
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_compaction_committed_during_conversion_sends_the_conversion_back_without_losing_a_delete(
    sqlite_catalog: CatalogConfig,
) -> None:
    model = fill(sqlite_catalog, 4, properties=KEEP)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    raced = [False]

    def compact_meanwhile() -> None:
        if not raced[0]:
            raced[0] = True
            other = open_catalog(sqlite_catalog).load_table(TABLE)
            compact(target(sqlite_catalog), other, plan_compaction(other, MaintenancePolicy(), everything=True))

    result = convert_equality_deletes(target(sqlite_catalog, compact_meanwhile), table)
    assert raced[0] and result.conflict is not None and "removed since" in result.conflict
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()
    # The compaction applied every equality delete and dropped them: nothing is left to convert.
    assert live_files(open_catalog(sqlite_catalog).load_table(TABLE)).equality_deletes == []


def test_maintenance_commits_never_move_a_jobs_marker_and_streams_go_on(catalog_config: CatalogConfig) -> None:
    model = fill(catalog_config, 3, properties=KEEP)
    maintainer = Maintainer(open_catalog(catalog_config), catalog_config)
    table = open_catalog(catalog_config).load_table(TABLE)
    maintainer.run(table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True))
    rng = random.Random(9)
    for checkpoint in range(3, 6):  # the job continues after two maintenance commits
        changes = random_changes(rng, checkpoint)
        commit_changes(catalog_config, checkpoint, changes)
        model.apply(changes)
    table = open_catalog(catalog_config).load_table(TABLE)
    assert committed_marker(table.metadata, "cdc").checkpoint_id == 5
    operations = [s.summary.operation.value for s in table.metadata.snapshots]
    assert operations.count("replace") == 1 and operations.count("delete") >= 1
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()


def test_between_commits_only_what_is_due_runs_and_a_second_maintainer_waits(sqlite_catalog: CatalogConfig) -> None:
    from icesink.catalog.lease import Lease, maintenance_scope
    from icesink.errors import MaintenanceBusyError

    fill(sqlite_catalog, 3, properties={"icesink.maintain.min-commits": "100"})
    maintainer = Maintainer(open_catalog(sqlite_catalog), sqlite_catalog)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert maintainer.between_commits(table, TABLE) is None  # no equality deletes, compaction not due yet
    other = Lease(sqlite_catalog, maintenance_scope(TABLE), "someone-else", ttl=60)
    assert other.acquire()
    with pytest.raises(MaintenanceBusyError, match="another maintainer"):
        maintainer.run(table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True))
    other.release()
    report = maintainer.run(table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True))
    assert report.compaction is not None and report.compaction.groups_committed == 1


def test_bad_maintenance_properties_are_named() -> None:
    from icesink.errors import ConfigError

    with pytest.raises(ConfigError, match=r"icesink\.maintain\.max-seconds='soon' is not a valid float"):
        MaintenancePolicy.of({"icesink.maintain.max-seconds": "soon"}, "shop.kv")
    assert MaintenancePolicy.of({"icesink.maintain.min-commits": "3"}, "shop.kv").min_commits == 3


def test_a_mistake_in_a_maintenance_setting_holds_up_maintenance_not_commits(sqlite_catalog: CatalogConfig) -> None:
    """A commit that converts deletes reads only the conversion settings: a bad icesink.maintain.* value is
    reported by maintenance, and the stream's checkpoints keep committing (converted, as the default says)."""
    model = fill(sqlite_catalog, 1, properties={"icesink.maintain.min-commits": "0"})
    for checkpoint in (1, 2):
        changes = random_changes(random.Random(checkpoint), checkpoint)
        commit_changes(sqlite_catalog, checkpoint, changes)
        model.apply(changes)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert table.current_snapshot().summary["icesink.max-committed-checkpoint-id"] == "2"
    assert live_files(table).equality_deletes == []
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


# --- Crash cases: a real `icesink maintain` process killed at each moment --------------------------------


# Renewed every second: a busy machine delays a renewal without the run losing its lease.
MAINTAIN_LEASE_TTL = 3


def run_maintain(config: CatalogConfig, failpoint: str = "", everything: bool = True) -> int:
    env = {k: v for k, v in os.environ.items() if k != "ICESINK_FAILPOINTS"}
    if failpoint:
        env["ICESINK_FAILPOINTS"] = failpoint
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    maintain = ["maintain", TABLE, *(["--all"] if everything else []), "--lease-ttl", str(MAINTAIN_LEASE_TTL)]
    done = subprocess.run(
        [sys.executable, "-m", "icesink.cli", *base, *maintain],
        cwd=ROOT,
        env=env,
        capture_output=True,
    )
    return done.returncode


MOMENTS = [
    "maintain.convert.after-resolve",
    "maintain.convert.after-write",
    "maintain.compact.after-write",
    "maintain.before-commit",
    "maintain.after-commit",
]


@pytest.mark.faults
@pytest.mark.parametrize("moment", MOMENTS)
def test_maintenance_killed_at_every_moment_leaves_the_table_exact(catalog_config: CatalogConfig, moment: str) -> None:
    if catalog_config.uri.startswith("sqlite") and moment not in ("maintain.before-commit", "maintain.after-commit"):
        pytest.skip("covered on PostgreSQL; SQLite runs the moments around the catalog commit")
    model = fill(catalog_config, 4, properties=KEEP)
    assert run_maintain(catalog_config, moment) == -signal.SIGKILL
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()
    # What the killed run wrote but never committed is garbage that gc removes; the table still reads exactly.
    from tests.helpers.support import age_everything

    age_everything(Path(catalog_config.warehouse.removeprefix("file://")))
    collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, datetime.timedelta(hours=1))
    time.sleep(MAINTAIN_LEASE_TTL + 0.1)  # the killed maintainer's lease expires
    assert run_maintain(catalog_config) == 0
    table = open_catalog(catalog_config).load_table(TABLE)
    live = live_files(table)
    assert live.equality_deletes == [] and len(live.data) == 1
    for rows in rows_by_every_reader(catalog_config):
        assert rows == model.expected()
    check_outcome(f"maintenance killed at {moment}", catalog_config, TABLE, sorted(model.rows))


def test_an_equality_delete_of_a_null_key_removes_the_rows_whose_key_is_null(sqlite_catalog: CatalogConfig) -> None:
    """Iceberg's equality treats null as equal to null: readers, conversion and compaction all do."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from icesink.results import FileContent, WriteResult
    from icesink.writer.files import FileNamer, RollingFileWriter

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("shop")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType()))
    table = catalog.create_table(TABLE, schema, properties=KEEP)
    table.append(pa.table({"id": pa.array([None, 1, None, 2], pa.int64()), "v": ["a", "b", "c", "d"]}))
    table = catalog.load_table(TABLE)
    # Another engine's equality delete of the key null (icesink's own writer refuses null keys).
    spec = writer_spec(table, TABLE, "other").for_checkpoint(0)
    writer = RollingFileWriter(
        spec,
        FileNamer("other", 0, 0, 0),
        (),
        spec.data_location,
        (spec.columns[0],),
        content=FileContent.EQUALITY_DELETES,
        equality_ids=(1,),
    )
    writer.write(pa.table({"id": pa.array([None, 2], pa.int64())}))
    stage_checkpoint(
        Ledger(sqlite_catalog), table, TABLE, "other", 0, [WriteResult(0, 0, 0, delete_files=tuple(writer.close()))]
    )
    TableCommitter.of(sqlite_catalog).commit_pending(TABLE)
    expected = [(1, "b")]
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == expected
    Maintainer(catalog, sqlite_catalog).run(
        catalog.load_table(TABLE), TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True)
    )
    assert live_files(catalog.load_table(TABLE)).equality_deletes == []
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == expected


def test_a_pass_reads_a_delete_file_naming_several_data_files_once(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction's plan and the delete merges' plan both count what delete files name: a file naming several
    data files is read for the first and remembered for the second (and for every later pass)."""
    from icesink.iceberg.scan import live_files
    from icesink.maintenance import choosing

    create(sqlite_catalog)
    commit_changes(sqlite_catalog, 0, [(k, "a", "I") for k in range(10)])
    commit_changes(sqlite_catalog, 1, [(k, "b", "I") for k in range(10, 20)])
    commit_changes(sqlite_catalog, 2, [(1, "c", "U"), (11, "c", "U"), (12, "", "D")])
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    deletes = [d.file for d in live_files(table).position_deletes]
    assert len(deletes) == 1 and choosing.named_by(deletes[0]) is None  # one file naming both data files
    opened: list[object] = []
    parquet_file = choosing.pq.ParquetFile

    def counted(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return parquet_file(*args, **kwargs)

    monkeypatch.setattr(choosing.pq, "ParquetFile", counted)
    first = choosing.count_position_deletes(table.io, deletes)
    again = choosing.count_position_deletes(table.io, deletes)
    assert len(opened) == 1
    assert first.by_data_file == again.by_data_file
    assert sorted(first.by_data_file[p][str(deletes[0].file_path)] for p in first.by_data_file) == [1, 2]
