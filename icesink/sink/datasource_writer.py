"""``df.writeStream.format("icesink")``: appends through pyspark's ``DataSourceStreamArrowWriter``.

The Spark-native shape of the same protocol as :func:`icesink.stream`:
executors write Parquet files from Arrow batches (icesink's Arrow writer) and
hand back their ``WriteResult``; the driver's ``commit(messages, batch_id)``
stages the checkpoint in the ledger and commits it, with the same marker
checks, so a re-delivered batch is never committed twice.

What the API does not allow, and so what this sink does not do (use
:func:`icesink.stream` for it):

* keyed upserts and CDC: a writer cannot ask Spark to distribute rows by key,
  and every change of a key must reach one task to be collapsed there;
* Spark's own Parquet writer (rows always cross into Python workers, so this
  sink writes at the Arrow writer's speed, docs/performance.md);
* the stream's identity: the writer is not told Spark's query id, so a
  ``job_id`` option is required and shared job ids cannot be detected;
* per-batch state: each ``commit`` runs in a fresh Python worker, which opens
  the catalog again (about 0.1-0.3 s per micro-batch).

Options: ``table`` (required), ``job_id`` (required), ``catalog`` or
``catalog.<key>`` as for the change stream. Any other option is refused, and
so are key options (``equality_fields``, ``op_column``, ...) and tables with
identifier fields, which this sink could only append to (several rows per key).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from icesink.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table
    from pyspark.sql.types import StructType

    from icesink.catalog.config import CatalogConfig
    from icesink.writer.spec import WriterSpec

log = logging.getLogger("icesink.stream")
# Options of icesink.stream this sink cannot honour (as written with "_" or "-").
KEY_OPTIONS = ("equality_fields", "op_column", "op_values", "sequence_by")


def _refuse_keyed_table(table: Table, identifier: str) -> None:
    """A table with a key gets upserts from icesink.stream; appending here would give a key several rows."""
    schema = table.schema()
    if schema.identifier_field_ids:
        names = ", ".join(schema.find_column_name(i) or str(i) for i in sorted(schema.identifier_field_ids))
        raise ConfigError(
            f'table {identifier} has identifier fields ({names}), and writeStream.format("icesink") only appends, '
            "which would give a key several rows; write it with icesink.stream(df, table) (it upserts on the key)"
        )


def _table_and_job(options: dict[str, str]) -> tuple[str, str]:
    """The table and job id the options name, after refusing the options this sink would ignore."""
    from icesink.catalog.config import check_data_source_options

    what = 'writeStream.format("icesink")'
    keyed = sorted(k for k in options if k.replace("-", "_") in KEY_OPTIONS)
    if keyed:
        raise ConfigError(
            f"{what}: option {keyed[0]!r}: this sink only appends; keyed upserts and CDC need every change of a "
            "key in one task, which a data source writer cannot ask Spark for. Use icesink.stream(df, table, "
            "equality_fields=..., op_column=...)"
        )
    table = check_data_source_options(what, options, ("job_id", "job-id"))
    job_id = options.get("job_id") or options.get("job-id")
    if not job_id:
        raise ConfigError(
            f'table {table}: {what} needs .option("job_id", ...): the data source API does not tell a writer its '
            "query id (icesink.stream derives it)"
        )
    return table, job_id


@dataclass
class WrittenFiles(WriterCommitMessage):
    """What one task wrote: an encoded ``WriteResult``."""

    result: bytes


class IcesinkStreamWriter(DataSourceStreamArrowWriter):
    """Writes appends on executors and stages and commits them on the driver, once per batch id."""

    def __init__(self, table: str, job_id: str, config: CatalogConfig, spec: WriterSpec) -> None:
        self._table = table
        self._job_id = job_id
        self._config = config
        self._spec = spec

    @classmethod
    def create(cls, options: dict[str, str], schema: StructType, overwrite: bool = False) -> IcesinkStreamWriter:
        """Check the options and the DataFrame against the table, on the driver, before anything runs.

        ``overwrite`` is Spark's complete output mode, which hands the sink the whole result at every trigger.
        """
        from icesink.catalog.config import catalog_from_options
        from icesink.catalog.loader import load_table, open_catalog
        from icesink.iceberg.describe import writer_spec
        from icesink.sink.projection import plan_projection

        if overwrite:  # first: whatever else the options say, this query cannot run
            raise ConfigError(
                f'table {options.get("table")}: writeStream.format("icesink") appends each micro-batch, and '
                'outputMode("complete") hands it the whole result again at every trigger, which would be appended '
                "again and again. Use "
                'outputMode("append") (an aggregation then needs a watermark); rows that change over time belong '
                "in a keyed table, written by icesink.stream(df, table=..., equality_fields=[...])"
            )
        table, job_id = _table_and_job(options)
        config = catalog_from_options(options)
        iceberg_table = load_table(open_catalog(config, pending_tables=True), config, table)
        _refuse_keyed_table(iceberg_table, table)
        projection = plan_projection(schema, iceberg_table.schema(), table)
        if any(c.source != c.name or c.cast for c in projection.columns):
            raise ConfigError(
                f"table {table}: the DataFrame's columns must be the table's, by name and type "
                f"({', '.join(f.name for f in iceberg_table.schema().fields)}); select and cast them first"
            )
        return cls(table, job_id, config, writer_spec(iceberg_table, table, job_id))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        from icesink.results import encode_write_result
        from icesink.writer.task import run_task

        # Executors are not told the batch id: file names carry a uuid, and the driver assigns the checkpoint.
        return WrittenFiles(encode_write_result(run_task(self._spec.for_checkpoint(0), iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from dataclasses import replace

        from icesink.catalog.checkpoints import StreamIdentity
        from icesink.catalog.ledger import Ledger
        from icesink.catalog.loader import load_table, open_catalog
        from icesink.committer.commit import TableCommitter
        from icesink.committer.protocol import Admission, admit
        from icesink.committer.staging import stage_checkpoint
        from icesink.results import decode_write_result
        from icesink.table_ref import TableRef

        catalog = open_catalog(self._config, pending_tables=True)
        table = load_table(catalog, self._config, self._table)
        ledger = Ledger(self._config)
        # This sink does not know its stream's identity (Spark hands the data source no checkpoint location).
        decision = admit(ledger, table, TableRef(self._table), self._job_id, batchId, StreamIdentity())
        if decision.refusal is not None:
            raise decision.refusal
        if decision.admission != Admission.WRITE:
            log.info(
                "table=%s job=%s checkpoint=%d already %s; skipped",
                self._table,
                self._job_id,
                batchId,
                decision.admission,
            )
        else:
            results = [
                replace(r, checkpoint_id=batchId)
                for r in (decode_write_result(m.result) for m in messages if isinstance(m, WrittenFiles))
            ]
            stage_checkpoint(ledger, table, self._table, self._job_id, batchId, results, schema_id=self._spec.schema_id)
        TableCommitter(catalog, self._config, ledger).commit_pending(self._table, self._job_id)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Files of a failed batch are unreferenced; remove what the finished tasks wrote."""
        from icesink.results import decode_write_result
        from icesink.writer.storage import split_location

        for message in messages:
            if isinstance(message, WrittenFiles):
                for record in decode_write_result(message.result).data_files:
                    filesystem, path = split_location(record.path, self._spec.storage_options)
                    filesystem.delete_file(path)
