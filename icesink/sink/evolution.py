"""Keeping a stream's columns and its table's schema in step, micro-batch by micro-batch.

Before a batch is written its DataFrame is matched with the table's current
schema (which another tool may have changed since the last batch): columns
the stream wrote before keep their field ids, so a rename in the table is
followed. With ``evolve_schema=True`` what does not fit but could without
loss (a new column, a wider type) is committed to the table first, in a
metadata commit of its own; after the write, required columns that received
nulls are made optional before the checkpoint is staged. Without it, each of
those is refused with the column and the option named.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.loader import load_table
from icesink.errors import CommitConflictError, SchemaMismatchError
from icesink.iceberg.schemas import MakeOptional, SchemaChange, apply_schema_changes, schema_by_id
from icesink.sink.projection import Projection, plan_schema, schema_refusal

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql.types import StructType

    from icesink.catalog.ledger import Ledger
    from icesink.results import WriteResult
    from icesink.writer.spec import WriterSpec

log = logging.getLogger("icesink.stream")

SCHEMA_COMMIT_ATTEMPTS = 8


def known_field_ids(ledger: Ledger, table: Table, identifier: str, job_id: str | None) -> dict[str, int]:
    """DataFrame column → field id as the job's last checkpoint wrote them (empty for a new job).

    Checkpoints staged before icesink recorded the mapping give the names of
    the schema they were written with.
    """
    if not job_id:
        return {}
    schema_id, column_ids = ledger.last_columns(identifier, job_id)
    if column_ids is not None:
        return column_ids
    schema = schema_by_id(table, schema_id) if schema_id is not None else None
    return {f.name: f.field_id for f in schema.fields} if schema is not None else {}


class SchemaTracker:
    """One stream's view of its table's schema."""

    def __init__(
        self,
        catalog: SqlCatalog,
        config: CatalogConfig,
        ledger: Ledger,
        identifier: str,
        passthrough: Sequence[str],
        evolve: bool,
    ) -> None:
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._identifier = identifier
        self._passthrough = tuple(passthrough)
        self._evolve = evolve
        self._field_ids: dict[str, int] | None = None  # DataFrame column → field id, as last written

    def fit(self, spark_schema: StructType, table: Table, job_id: str, checkpoint_id: int) -> tuple[Table, Projection]:
        """The table (evolved if allowed and needed) and how to project the batch onto it."""
        if self._field_ids is None:
            self._field_ids = known_field_ids(self._ledger, table, self._identifier, job_id)
        for _ in range(SCHEMA_COMMIT_ATTEMPTS):
            plan = plan_schema(spark_schema, table.schema(), self._identifier, self._passthrough, self._field_ids)
            if plan.projection is not None:
                return table, plan.projection
            if not self._evolve:
                raise SchemaMismatchError(schema_refusal(self._identifier, plan.changes[0]))
            table = self._apply(table, plan.changes, checkpoint_id)
        raise self._conflict(checkpoint_id)

    def remember(self, projection: Projection) -> None:
        """The batch was written: its columns keep these field ids whatever the table renames."""
        self._field_ids = projection.field_ids

    def required_nulls(self, spec: WriterSpec, results: Sequence[WriteResult]) -> tuple[MakeOptional, ...]:
        """Required columns (never a key) that received nulls in this batch's files."""
        nulls: dict[int, int] = {}
        for result in results:
            for record in result.data_files:
                for field_id, count in record.null_value_counts.items():
                    nulls[field_id] = nulls.get(field_id, 0) + count
        keys = set(spec.changes.equality_field_ids) if spec.changes else set()
        return tuple(
            MakeOptional(c.name, c.field_id)
            for c in spec.columns
            if c.required and c.field_id not in keys and nulls.get(c.field_id, 0) > 0
        )

    def make_optional(self, table: Table, changes: Sequence[MakeOptional], checkpoint_id: int) -> Table:
        """Make the columns optional before the checkpoint that holds their nulls is staged."""
        for _ in range(SCHEMA_COMMIT_ATTEMPTS):
            current = {f.field_id: f for f in table.schema().fields}
            left = [c for c in changes if c.field_id in current and current[c.field_id].required]
            if not left:
                return table
            # By the column's name now: someone may have renamed it since the batch was planned.
            renamed = [MakeOptional(current[c.field_id].name, c.field_id) for c in left]
            table = self._apply(table, renamed, checkpoint_id)
        raise self._conflict(checkpoint_id)

    def _apply(self, table: Table, changes: Sequence[SchemaChange], checkpoint_id: int) -> Table:
        """One schema commit; the table as it is afterwards (re-read when someone else moved it first)."""

        before = table.metadata.current_schema_id
        try:
            with database_errors(self._config):
                apply_schema_changes(table, changes)
        except CommitFailedException:
            log.info("table=%s: schema changed during a schema update; planning again", self._identifier)
            return load_table(self._catalog, self._config, self._identifier)
        except ValueError as e:  # pyiceberg's refusal of a change, e.g. an identifier field made optional
            wanted = "; ".join(c.describe() for c in changes)
            raise SchemaMismatchError(
                f"table {self._identifier}, checkpoint {checkpoint_id}: the schema change evolve_schema needs "
                f"({wanted}) was refused: {e}. Nothing of this batch was written; change the DataFrame or the "
                "table so that they fit"
            ) from e
        table = load_table(self._catalog, self._config, self._identifier)
        log.warning(
            "table=%s checkpoint=%d: schema %d -> %d: %s",
            self._identifier,
            checkpoint_id,
            before,
            table.metadata.current_schema_id,
            "; ".join(c.describe() for c in changes),
        )
        return table

    def _conflict(self, checkpoint_id: int) -> CommitConflictError:
        return CommitConflictError(
            f"table {self._identifier}, checkpoint {checkpoint_id}: the table's schema kept changing while this "
            f"stream tried to evolve it ({SCHEMA_COMMIT_ATTEMPTS} attempts); nothing of the batch was staged, "
            "Spark retries it on restart"
        )
