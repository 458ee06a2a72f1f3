"""Maintenance while real change streams run: the table equals the model after every micro-batch.

* A stream that keeps its equality deletes and maintains inline
  (``maintain=True``): maintenance converts them and compacts between
  micro-batches; unpartitioned and bucket-partitioned.
* A stream committing every checkpoint as fast as it can through
  ``icesink committer run --maintain``: maintenance runs between the daemon's
  commits while the next micro-batches are written; every run that was due
  finishes, no update is lost, no deleted row comes back.

At the end, after a final ``icesink maintain --all``, iceberg-rust, Iceberg
Java 1.9.2 and pyiceberg's own scan read exactly the model.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import icesink
from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.cli import main
from icesink.committer.daemon import CommitterDaemon
from icesink.iceberg.scan import live_files
from tests.helpers.changes import ChangeModel, random_checkpoint, sorted_rows, write_checkpoint_file
from tests.helpers.outcomes import check_outcome, iceberg_rust_sql, read_many_with_iceberg_java
from tests.test_upsert import TABLE, cdc_stream, run_cdc

pytestmark = [pytest.mark.spark, pytest.mark.interop]

COLUMNS = ["region", "id", "value", "seq"]
# Maintenance as often as possible, so that every micro-batch meets some.
EAGER = {
    "icesink.equality-deletes.convert-at-commit": "false",
    "icesink.maintain.min-commits": "2",
    "icesink.maintain.min-input-files": "2",
}


def final_maintain(config: CatalogConfig, identifier: str = TABLE) -> None:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    result = CliRunner().invoke(main, [*base, "maintain", identifier, "--all", "--json"])
    assert result.exit_code == 0, result.output


def check_everyone_reads(java_reader: Path, finished: list[tuple[Any, ChangeModel]]) -> None:
    for table, model in finished:
        assert live_files(table).equality_deletes == []
        assert sorted_rows(table.scan().to_arrow()) == model.expected()  # pyiceberg itself
        assert sorted_rows(iceberg_rust_sql(table, "SELECT region, id, value, seq FROM t")) == model.expected()
    java = read_many_with_iceberg_java(java_reader, [(t.metadata_location, COLUMNS) for t, _ in finished])
    for rows, (_, model) in zip(java, finished, strict=True):
        assert sorted(rows, key=lambda r: (r["region"], r["id"])) == model.expected()


def test_cdc_streams_maintained_inline_equal_the_model_after_every_micro_batch(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, java_reader: Path, request: pytest.FixtureRequest
) -> None:
    from tests.conftest import _catalog

    finished = []
    for partition_by in ([], ["bucket(4, id)"]):
        tmp_path = tmp_path_factory.mktemp("inline")
        config = _catalog(request, tmp_path, "sqlite")
        rng = random.Random(41)
        model = ChangeModel()
        for checkpoint in range(5):
            changes = random_checkpoint(rng, checkpoint)
            write_checkpoint_file(tmp_path / "in", checkpoint, changes)
            model.apply(changes)
            run_cdc(spark, config, tmp_path, partition_by, table_properties=EAGER, maintain=True)
            assert sorted_rows(icesink.read(TABLE, catalog=config)) == model.expected(), (partition_by, checkpoint)
        table = open_catalog(config).load_table(TABLE)
        operations = [s.summary.operation.value for s in table.metadata.snapshots]
        assert "replace" in operations and operations.count("delete") >= 1  # compaction and conversion both ran
        final_maintain(config)
        finished.append((open_catalog(config).load_table(TABLE), model))
        assert sorted_rows(icesink.read(TABLE, catalog=config)) == model.expected()
    check_everyone_reads(java_reader, finished)


def test_a_fast_stream_and_the_maintaining_daemon_on_one_table(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    checkpoints = 8
    rng = random.Random(43)
    model = ChangeModel()
    for checkpoint in range(checkpoints):
        changes = random_checkpoint(rng, checkpoint)
        write_checkpoint_file(tmp_path / "in", checkpoint, changes)
        model.apply(changes)
    daemon = CommitterDaemon(sqlite_catalog, poll_interval=0.05, maintain=True)
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        query = icesink.stream(
            cdc_stream(spark, tmp_path / "in"),
            table=TABLE,
            checkpoint_location=str(tmp_path / "ckpt"),
            trigger={"availableNow": True},
            create_table=True,
            partition_by=["bucket(2, id)"],
            equality_fields=["region", "id"],
            op_column="op",
            sequence_by="seq",
            committer="daemon",
            table_properties=EAGER,
            catalog=sqlite_catalog,
        )
        query.awaitTermination()

        def all_committed() -> bool:
            rows = Ledger(sqlite_catalog).for_table(TABLE)
            return len(rows) == checkpoints and all(r.state == CheckpointState.COMMITTED for r in rows)

        deadline = time.monotonic() + 120
        while not all_committed():
            assert time.monotonic() < deadline, "the daemon did not commit every checkpoint"
            time.sleep(0.1)
    finally:
        daemon.stop()
        runner.join(60)
    reports = daemon.maintenance_reports
    assert len(reports) >= 2, "maintenance was due several times"
    for report in reports:  # every run that was due finished: nothing failed, nothing starved
        assert report.conversion is None or report.conversion.conflict is None
        assert report.compaction is None or report.compaction.groups_failed == []
    assert sorted_rows(icesink.read(TABLE, catalog=sqlite_catalog)) == model.expected()
    final_maintain(sqlite_catalog)
    check_everyone_reads(java_reader, [(open_catalog(sqlite_catalog).load_table(TABLE), model)])
    check_outcome(
        "fast CDC stream with the maintaining daemon",
        sqlite_catalog,
        TABLE,
        expected_rows=model.expected(),
    )
