"""Helpers shared by tests: tables, rows and files written without Spark."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from icesink.catalog.checkpoints import CheckpointRow
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.staging import TableResults, stage_checkpoint, stage_tables
from icesink.iceberg.describe import writer_spec
from icesink.results import WriteResult
from icesink.writer.task import TaskWriter

EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

ORDERS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)


def orders(start: int, count: int) -> pa.Table:
    """Deterministic rows with ids ``start .. start+count-1``."""
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i % 97}" for i in ids]),
            "amount": pa.array([i * 1.5 for i in ids]),
            "ts": pa.array([EPOCH + datetime.timedelta(hours=i) for i in ids], pa.timestamp("us", tz="UTC")),
        },
        schema=ORDERS_SCHEMA,
    )


def create_orders_table(
    config: CatalogConfig, identifier: str = "shop.orders", partition_by: tuple[str, ...] = (), pending: bool = False
) -> Any:
    from icesink.sink.tables import parse_partition_by

    catalog = open_catalog(config, pending_tables=pending)
    namespace, name = identifier.rsplit(".", 1)
    catalog.create_namespace_if_not_exists(namespace)
    schema = _orders_schema()
    spec = parse_partition_by(identifier, schema, partition_by)
    if pending:  # as a stream into several tables creates it: readers see it with its first commit
        from icesink.sink.tables import new_table_location

        location = new_table_location(catalog, config, namespace, name)
        return catalog.create_pending_table(identifier, schema, spec, location, {})  # type: ignore[attr-defined]
    return catalog.create_table(identifier, schema=schema, partition_spec=spec)


def _orders_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
        NestedField(4, "ts", TimestamptzType(), required=False),
    )


def write_files(
    table: Any, identifier: str, job_id: str, checkpoint_id: int, rows: pa.Table, task_id: int = 0
) -> WriteResult:
    """What one executor task would return for ``rows``."""
    spec = writer_spec(table, identifier, job_id).for_checkpoint(checkpoint_id)
    writer = TaskWriter(spec, task_id=task_id, attempt=0)
    writer.write(rows)
    return writer.complete()


def stage_rows(config: CatalogConfig, identifier: str, job_id: str, checkpoint_id: int, rows: pa.Table) -> bool:
    """Write ``rows`` as files and stage them as one checkpoint, as the driver does."""
    catalog = open_catalog(config, pending_tables=True)
    table = catalog.load_table(identifier)
    result = write_files(table, identifier, job_id, checkpoint_id, rows)
    return stage_checkpoint(Ledger(config), table, identifier, job_id, checkpoint_id, [result])


def staged_in_manifests(config: CatalogConfig, identifier: str, job_id: str, checkpoint_id: int) -> CheckpointRow:
    """The checkpoint's ledger row made as releases before inline files staged it: its files in delta manifest
    files in the table's metadata directory, the row naming them (version 1 of its value). Rows an upgrade
    finds staged are such rows; so is any checkpoint whose manifest a test loses."""
    import uuid

    from icesink.catalog.checkpoints import DeltaManifests, InlineFiles, StagedManifest
    from icesink.catalog.database import engine
    from icesink.catalog.ledger import checkpoints
    from icesink.iceberg.manifests import to_data_file, write_delta_manifest

    ledger = Ledger(config)
    (row,) = [r for r in ledger.pending(identifier, job_id, with_files=True) if r.checkpoint_id == checkpoint_id]
    table = open_catalog(config, pending_tables=True).load_table(identifier)
    manifests: list[StagedManifest | None] = []
    for deletes, staged in ((False, row.manifests.data), (True, row.manifests.deletes)):
        if staged is None:
            manifests.append(None)
            continue
        assert isinstance(staged, InlineFiles) and row.files is not None
        partition_type = table.metadata.specs()[row.spec_id].partition_type(table.schema())
        records = row.files.deletes if deletes else row.files.data
        files = [to_data_file(r, table.metadata.format_version, partition_type) for r in records]
        name = f"icesink-{checkpoint_id:010d}-{uuid.uuid4().hex}-{'deletes' if deletes else 'data'}.avro"
        path = table.location_provider().new_metadata_location(name)
        written = write_delta_manifest(table.metadata, table.io, path, row.spec_id, files, deletes=deletes)
        manifests.append(StagedManifest(path, written.length, staged.files, staged.records))
    value = DeltaManifests(*manifests).encode()
    assert '"version":1' in value
    with engine(config).begin() as connection:
        connection.execute(
            checkpoints.update()
            .where(checkpoints.c.id == row.id)
            .values(delta_manifests=value, staged_files=None, manifests_deleted=False)
        )
    again = ledger.get(identifier, job_id, checkpoint_id)
    assert again is not None
    return again


def staged_files_now(config: CatalogConfig) -> dict[int, str | None]:
    """Each ledger row's staged files as they are now (read before a commit lets them go)."""
    import sqlalchemy as sa

    from icesink.catalog.database import engine
    from icesink.catalog.ledger import checkpoints

    c = checkpoints.c
    with engine(config).connect() as connection:
        rows = connection.execute(sa.select(c.id, c.staged_files).where(c.catalog_name == config.name))
        return {row_id: files for row_id, files in rows}


def lose_the_ledger_update(config: CatalogConfig, files: dict[int, str | None], snapshot_id_too: bool = True) -> None:
    """What a crash between the catalog commit and the ledger update leaves: the rows staged again, holding the
    files they staged (``files``, read by :func:`staged_files_now` before the commit)."""
    import sqlalchemy as sa

    from icesink.catalog.database import engine
    from icesink.catalog.ledger import checkpoints

    c = checkpoints.c
    values: dict[str, Any] = {"state": "staged", "manifests_deleted": False, "staged_files": sa.bindparam("files")}
    if snapshot_id_too:
        values["snapshot_id"] = None
    with engine(config).begin() as connection:
        connection.execute(
            checkpoints.update().where(c.id == sa.bindparam("row_id")).values(**values),
            [{"row_id": row_id, "files": staged} for row_id, staged in files.items()],
        )


def stage_group(
    config: CatalogConfig, job_id: str, checkpoint_id: int, rows: dict[str, pa.Table | None], atomic: bool = True
) -> bool:
    """Stage one checkpoint of a job writing several tables (``None``: the checkpoint wrote nothing there)."""
    catalog = open_catalog(config, pending_tables=True)
    written = []
    for identifier, table_rows in rows.items():
        table = catalog.load_table(identifier)
        results = [write_files(table, identifier, job_id, checkpoint_id, table_rows)] if table_rows is not None else []
        written.append(TableResults(table, identifier, results))
    return stage_tables(Ledger(config), job_id, checkpoint_id, written, atomic=atomic)


def pointers(config: CatalogConfig) -> dict[str, str]:
    """Every table's metadata location in the catalog, read in one statement (one transaction)."""
    import sqlalchemy as sa

    from icesink.catalog.database import engine

    query = sa.text("SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :c")
    with engine(config).connect() as connection:
        return {f"{ns}.{name}": loc for ns, name, loc in connection.execute(query, {"c": config.name})}


def table_ids(config: CatalogConfig, identifier: str) -> list[int]:
    """Every ``id`` in the table, sorted, duplicates kept (read by pyiceberg)."""
    table = open_catalog(config).load_table(identifier)
    return sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())


def age_everything(root: Path, seconds: float = 7200) -> None:
    """Make every file under ``root`` look ``seconds`` old (for ``committer gc``'s age limit)."""
    old = time.time() - seconds
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))


def wait_for(condition: Any, what: str, seconds: float = 90, tolerate: tuple[type[Exception], ...] = ()) -> float:
    """Poll ``condition`` until it holds and return how long that took; an AssertionError naming ``what``
    after ``seconds``. Exceptions of the ``tolerate`` types count as "not yet" (a file still being written)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            if condition():
                return time.monotonic() - started
        except tolerate:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def add_input_file(directory: Path, table: pa.Table) -> None:
    """The next Parquet file of a streaming file source, appearing whole and ordered after the others."""
    import pyarrow.parquet as pq

    from tests.helpers.streams import order_for_file_source

    directory.mkdir(parents=True, exist_ok=True)
    number = len(list(directory.glob("*.parquet")))
    path = directory / f"part-{number:05d}.parquet"
    pq.write_table(table, directory / ".tmp")
    (directory / ".tmp").rename(path)
    order_for_file_source(path, number)
