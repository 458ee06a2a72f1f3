"""What a Debezium stream says when it refuses a table, a column or a key: the source table, the records and the
table named, and what to do."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from icesink.debezium_events.route import RoutedTable, shared_target_message
from icesink.errors import ConfigError, SchemaMismatchError
from icesink.properties import SOURCE_PROPERTY

if TYPE_CHECKING:
    from icesink.debezium_events.sources import SourceTable
    from icesink.debezium_events.stream_spec import Debezium


def explainer(table: RoutedTable) -> Callable[[SchemaMismatchError, int | None], SchemaMismatchError] | None:
    """A column type the table cannot take, said with the records that bring it."""
    if table.source is None:
        return None
    source = table.source

    def explain(error: SchemaMismatchError, checkpoint_id: int | None) -> SchemaMismatchError:
        if error.column is None or not table.holders(error.column):
            return error
        at = f", checkpoint {checkpoint_id}" if checkpoint_id is not None else ""
        return SchemaMismatchError(
            f"table {table.identifier}{at}: column {error.column!r} is {error.table_type} in "
            f"the table, and the micro-batch's records of source {source} hold {table.holders(error.column)}; "
            "Iceberg widens an int to a long, a float to a double and a decimal's precision, never its scale, and "
            "changes no type into another. Nothing of the micro-batch was written. Write the source into a new "
            "table (a mapping in icesink.debezium(tables=...)), or change the column back at the source",
            column=error.column,
            table_type=error.table_type,
            table=table.identifier,
            checkpoint_id=checkpoint_id,
        )

    return explain


def taken(
    spec: Debezium, table: RoutedTable, owner: SourceTable | None, why: str, recorded: str | None = None
) -> ConfigError:
    """Refusal of a second source table for a table that belongs to another."""
    assert table.source is not None
    if owner is None:
        return ConfigError(
            f"table {table.identifier}: it records {recorded!r} as its source table ({SOURCE_PROPERTY}), which is "
            f"not a source icesink recorded; source table {table.source} would go there. Nothing of the "
            "micro-batch was written. Map the source to another table, or remove the property if the table is "
            "the source's",
            table=table.identifier,
        )
    return ConfigError(
        f"{shared_target_message(spec, table.identifier, [owner, table.source])} The table belongs to source "
        f"table {owner.describe()} ({why}). If that source table was only renamed (its connector, database or "
        f"schema), remove the table property {SOURCE_PROPERTY} from the table and the stream records the new name",
        table=table.identifier,
    )


def keyed_dead_letter(identifier: str, keys: tuple[str, ...], outcome: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"table {identifier}: it is the stream's dead_letter table, which takes every rejected record as a row of "
        f"its own, but it is keyed by ({', '.join(keys)}), so records would replace each other. {outcome}. Name "
        "a new table as dead_letter (icesink creates it), or drop the table's identifier fields",
        table=identifier,
    )


def key_changed(table: RoutedTable, before: tuple[str, ...]) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"table {table.identifier}: its events are keyed by ({', '.join(table.keys)}), but the table is keyed by "
        f"({', '.join(before)}); the source's primary key changed. Nothing of the micro-batch was written. "
        "Keying rows by another key would merge or split them: write the table anew under a new name (a "
        "mapping in icesink.debezium(tables=...)), or change its identifier fields first",
        table=table.identifier,
    )
