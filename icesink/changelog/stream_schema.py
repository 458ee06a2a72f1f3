"""A change stream keeps the columns its DataFrame was made with.

Spark fixes a streaming source's columns when ``icesink.read_stream`` makes the DataFrame, and keeps them across
every start of a query made from it. A snapshot committed later with a column those columns lack, a column's type
promoted (``int`` to ``long``) or a required column made optional cannot be read into them: read anyway, the new
column's values would be left out of every micro-batch (and lost for good: a DataFrame made anew reads only the
changes after), a promoted value would not fit, a null would reach a column declared not nullable. So the
micro-batch that reaches such a snapshot stops the stream before anything of it is read; a DataFrame made anew
reads it, from the same offsets, with the table's new schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.errors import SchemaMismatchError, naming_table
from icesink.iceberg.schemas import columns_beyond, field_ids, schema_by_id
from icesink.spark_types import spark_columns

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql.types import StructField


@dataclass(frozen=True)
class StartedColumns:
    """The columns a stream's DataFrame was made with: the table's schema then, and every field id the table had
    used by then (a column dropped before is no new one when an older snapshot holds it)."""

    schema: Schema
    known_ids: frozenset[int]

    @classmethod
    def declared(cls, table: Table, columns: Sequence[StructField]) -> StartedColumns:
        """The table's newest schema whose columns are ``columns`` (its current one when none is)."""
        schemas = sorted(table.metadata.schemas, key=lambda s: s.schema_id)
        wanted = list(columns)
        schema = next((s for s in reversed(schemas) if spark_columns(s) == wanted), table.schema())
        known = frozenset(i for s in schemas if s.schema_id <= schema.schema_id for i in field_ids(s))
        return cls(schema, known | field_ids(schema))


def refuse_later_schemas(identifier: str, started: StartedColumns, table: Table, snapshots: Sequence[Snapshot]) -> None:
    """Raise when a snapshot of the micro-batch was written with a schema the stream's columns cannot hold."""
    judged = {started.schema.schema_id}
    for snapshot in snapshots:
        # A snapshot without a schema id (format 1, older writers) was written with the table's current schema.
        schema_id = snapshot.schema_id if snapshot.schema_id is not None else table.metadata.current_schema_id
        if schema_id in judged:
            continue
        judged.add(schema_id)
        later = schema_by_id(table, schema_id)
        beyond = columns_beyond(started.schema, started.known_ids, later) if later is not None else []
        if beyond:
            with naming_table(identifier):  # for the driver, which sees this planning error as Spark's text
                raise SchemaMismatchError(
                    f"table {identifier}: snapshot {snapshot.snapshot_id} was written after this stream's DataFrame "
                    f"was made, with a schema its columns cannot hold ({'; '.join(beyond)}). A DataFrame keeps the "
                    "columns the table had when it was made. Nothing of this micro-batch was read: start the stream "
                    "again (same checkpoint location) from a DataFrame made anew with icesink.read_stream, and it "
                    "reads this micro-batch with the table's new schema",
                    table=identifier,
                )
