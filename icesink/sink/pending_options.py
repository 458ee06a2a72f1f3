"""A pending table held to the options the stream that creates it asks, while it has no rows.

A stream into several tables creates its tables pending (:mod:`icesink.iceberg.pending_tables`): they enter
the catalog with their first commit. A stream refused after it created one (a partition spec its key does
not cover, say) is started again with other options; the table it left holds no rows, so it is created
anew with them, instead of holding the stream to what was refused. Once a checkpoint of it is staged, files
were written for the options it has, and a stream asking others is told what to do.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyiceberg import types as it
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import TableProperties

from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.ledger import Ledger
from icesink.commands import icesink_command
from icesink.errors import CommitConflictError, ConfigError
from icesink.iceberg.pending_tables import PendingAwareCatalog
from icesink.properties import USER_PROPERTIES, unknown_property
from icesink.sink.projection import PATH_SEPARATOR, path_key

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icesink.catalog.checkpoints import CheckpointRow

log = logging.getLogger("icesink.stream")


def pending_note(identifier: str) -> str:
    """What to do about a refusal that concerns a pending table: its options are not final until it has rows."""
    return (
        f"Table {identifier} is pending (a stream created it, and nothing of it is committed yet): a stream that "
        "creates it (create_table=True, or icesink.debezium) and is started again with other options creates it "
        f"anew with them while nothing of it is staged, and `{icesink_command('tables drop-pending', identifier)}` "
        "gives it up"
    )


def kept_pending(
    catalog: SqlCatalog,
    config: CatalogConfig,
    table: Table,
    identifier: str,
    schema: Schema,
    spec: PartitionSpec,
    properties: dict[str, str],
) -> Table | None:
    """The pending table, if it has the options the stream asks; None once it is dropped to be created anew.

    A stream refused after it created its table (its first micro-batch never ran) is started again with
    other options: the table holds no rows, so it takes them. Once a checkpoint of it is staged, its files
    were written for the options it has: a stream asking another spec, key or properties is refused.
    """

    differences = _differences(table, schema, spec, properties)
    if not differences:
        return table
    recorded = Ledger(config).for_table(identifier, unreadable_too=True)
    staged = _staged(recorded)
    if staged:
        # Columns are the stream's fit to check, as for any table (the DataFrame may lack one it has).
        refused = [d for d in differences if d[0] != "columns"]
        if refused:
            raise ConfigError(_staged_refusal(identifier, refused, staged))
        return table
    moved = _moved_columns(recorded, table.schema(), schema)
    if moved:
        raise ConfigError(_moved_refusal(identifier, differences, moved))
    log.warning(
        "table %s: it is pending (created by a stream, nothing of it staged) with other options than this stream "
        "asks (%s); it holds no rows, so it is created anew with this stream's options",
        identifier,
        _described(differences),
    )
    assert isinstance(catalog, PendingAwareCatalog), "open the catalog with pending_tables=True"
    try:
        with database_errors(config):
            catalog.drop_pending_table(identifier)
    except (CommitFailedException, NoSuchTableError) as e:
        raise CommitConflictError(
            f"table {identifier}: another stream published or changed its pending table while this one created it "
            "anew with its own options; start the stream again"
        ) from e
    return None


# One option a pending table was created with that a stream now asks otherwise: (option, then, now).
Difference = tuple[str, str, str]


def _differences(table: Table, schema: Schema, spec: PartitionSpec, properties: dict[str, str]) -> list[Difference]:
    """What the pending table was created with that the stream asks otherwise."""

    found: list[Difference] = []
    current = table.schema()
    if current.fields != schema.fields:
        found.append(("columns", _columns(current), _columns(schema)))
    if current.identifier_field_names() != schema.identifier_field_names():
        then, now = (sorted(s.identifier_field_names()) for s in (current, schema))
        found.append(("its key (equality_fields)", f"[{', '.join(then)}]", f"[{', '.join(now)}]"))
    if _partition_by(current, table.spec()) != _partition_by(schema, spec):
        then, now = (_partition_by(s, p) for s, p in ((current, table.spec()), (schema, spec)))
        found.append(("partition_by", f"[{', '.join(then)}]", f"[{', '.join(now)}]"))
    # pyiceberg keeps the format version out of the properties it writes: compared as one where it was asked.
    had, asked = _given(table.properties), _given(properties)
    if TableProperties.FORMAT_VERSION in asked:
        had[TableProperties.FORMAT_VERSION] = str(table.metadata.format_version)
    if had != asked:
        found.append(("table_properties", repr(dict(sorted(had.items()))), repr(dict(sorted(asked.items())))))
    return found


def _given(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties a stream gives a table, without the ``icesink.*`` ones icesink sets itself (a Debezium
    table's source table, the markers), which a pending table may have gained since it was created."""

    def own(name: str) -> bool:
        return name.startswith("icesink.") and name not in USER_PROPERTIES and unknown_property(name) is None

    return {name: value for name, value in properties.items() if not own(name)}


def _columns(schema: Schema) -> str:
    return "(" + ", ".join(f"{f.name} {f.field_type}{' not null' if f.required else ''}" for f in schema.fields) + ")"


def _partition_by(schema: Schema, spec: PartitionSpec) -> list[str]:
    """A spec as ``partition_by`` writes it: ``name``, ``day(ts)``, ``bucket(16, id)``."""
    written = []
    for field in spec.fields:
        column = schema.find_column_name(field.source_id) or str(field.source_id)
        transform = str(field.transform)
        width = re.fullmatch(r"(\w+)\[(\d+)\]", transform)
        if transform == "identity":
            written.append(column)
        elif width:
            written.append(f"{width.group(1)}({width.group(2)}, {column})")
        else:
            written.append(f"{transform}({column})")
    return written


def _described(differences: list[Difference]) -> str:
    return "; ".join(f"{option}: {then} when it was created, {now} now" for option, then, now in differences)


def _staged(recorded: Sequence[CheckpointRow]) -> dict[str, list[int]]:
    """The checkpoints of the table staged in the ledger, by job."""

    staged: dict[str, list[int]] = {}
    for row in recorded:
        if row.state == CheckpointState.STAGED:
            staged.setdefault(row.job_id, []).append(row.checkpoint_id)
    return staged


def _moved_columns(recorded: Sequence[CheckpointRow], current: Schema, schema: Schema) -> dict[str, tuple[int, int]]:
    """DataFrame columns (and nested fields) that checkpoints of the table recorded as written to one field id
    and that the table created anew would give another: {path: (recorded id, new id)}.

    A stream finds the columns it wrote before by those ids (a rename elsewhere must not move them), so
    its rows would go to other columns. Checkpoints that wrote no file, and discarded ones, record them too.
    """

    new = _ids_by_path(schema)
    moved: dict[str, tuple[int, int]] = {}
    for row in recorded:
        # A row from before icesink recorded the columns names those of the schema it was written with.
        written = dict(row.column_ids) if row.column_ids is not None else _ids_by_path(current)
        for path, field_id in written.items():
            if new.get(path, field_id) != field_id:
                moved[path.replace(PATH_SEPARATOR, ".")] = (field_id, new[path])
    return moved


def _ids_by_path(schema: Schema) -> dict[str, int]:
    """Every field of a schema made from a DataFrame, by its path as the ledger records it (``path_key``)."""

    ids: dict[str, int] = {}

    def walk(field_type: it.IcebergType, path: tuple[str, ...]) -> None:
        if isinstance(field_type, it.StructType):
            for field in field_type.fields:
                ids[path_key((*path, field.name))] = field.field_id
                walk(field.field_type, (*path, field.name))
        elif isinstance(field_type, it.ListType):
            walk(field_type.element_type, (*path, "element"))
        elif isinstance(field_type, it.MapType):
            walk(field_type.key_type, (*path, "key"))
            walk(field_type.value_type, (*path, "value"))

    walk(schema.as_struct(), ())
    return ids


def _moved_refusal(identifier: str, differences: list[Difference], moved: dict[str, tuple[int, int]]) -> str:
    shown = ", ".join(f"{path!r} (field id {then}, now {now})" for path, (then, now) in sorted(moved.items())[:5])
    return (
        f"table {identifier} is pending (a stream created it; it enters the catalog with its first commit), and this "
        f"stream asks other options of it: {_described(differences)}. It holds no rows, but checkpoints of it in the "
        "ledger (committed without files, or discarded) recorded which field each DataFrame column went to, and the "
        f"table created anew would give these columns other fields: {shown}; the stream would write their values "
        "into other columns. Start the stream with the columns as they were (its other options can change), or "
        f"write the table under another name (`{icesink_command('tables drop-pending', identifier)}` gives this one up)"
    )


def _staged_refusal(identifier: str, differences: list[Difference], staged: dict[str, list[int]]) -> str:
    named = " and ".join(
        f"checkpoint{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} of job {job}"
        for job, ids in staged.items()
    )
    count = sum(len(ids) for ids in staged.values())
    only = next(iter(staged.values()))[0] if count == 1 else "N"
    return (
        f"table {identifier} is pending (a stream created it; it enters the catalog with its first commit), and this "
        f"stream asks other options of it: {_described(differences)}. {named} {'is' if count == 1 else 'are'} "
        "staged, written for the options it was created with, so it is not created anew. Let them commit (the table "
        f"keeps its options), or give them up (`{icesink_command('checkpoints discard', identifier, only)}`) and then "
        f"start the stream again (the table is created anew with its options) or give the table up "
        f"(`{icesink_command('tables drop-pending', identifier)}`)"
    )
