"""A running change stream keeps the columns it started with.

Spark fixes a streaming source's schema when the query starts. A snapshot committed later with a column the
stream does not have, or a column's type promoted (``int`` to ``long``), cannot be read into those columns: read
anyway, the new column's values would be left out of every micro-batch until a restart, which then reads only the
changes after it. So the micro-batch that reaches such a snapshot stops the stream before anything of it is read,
and a restart reads it, from the same offsets, with the table's new schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.errors import SchemaMismatchError
from icesink.iceberg.schemas import columns_beyond, schema_by_id

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot


@dataclass(frozen=True)
class StartedColumns:
    """The columns a stream started with: the table's schema then, and the highest column id it had assigned."""

    schema: Schema
    last_column_id: int

    @classmethod
    def of(cls, table: Table) -> StartedColumns:
        return cls(table.schema(), table.metadata.last_column_id)


def refuse_later_schemas(identifier: str, started: StartedColumns, table: Table, snapshots: Sequence[Snapshot]) -> None:
    """Raise when a snapshot of the micro-batch was written with a schema the stream's columns cannot hold."""
    judged = {started.schema.schema_id}
    for snapshot in snapshots:
        if snapshot.schema_id is None or snapshot.schema_id in judged:
            continue
        judged.add(snapshot.schema_id)
        later = schema_by_id(table, snapshot.schema_id)
        beyond = columns_beyond(started.schema, started.last_column_id, later) if later is not None else []
        if beyond:
            raise SchemaMismatchError(
                f"table {identifier}: snapshot {snapshot.snapshot_id} was written after this stream started, with "
                f"a schema its columns cannot hold ({'; '.join(beyond)}). A running stream keeps the columns it "
                "started with. Nothing of this micro-batch was read: start the stream again (same checkpoint "
                "location), and it reads this micro-batch with the table's new schema",
                table=identifier,
            )
