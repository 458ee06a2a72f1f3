"""Table schemas as a stream sees them: evolving one, and checking old files against a newer one.

Only additive, lossless changes are ever made here (Iceberg's rules for a
schema change that every reader of old files survives): a new optional
column, a primitive widened (``int`` → ``long``, ``float`` → ``double``, a
decimal's precision), a required column made optional. Renames, drops and
narrowing are never icesink's decision.

Each change set is one metadata commit of its own (pyiceberg's public
``update_schema``, which asserts the schema it started from): a concurrent
schema change makes it fail, and the caller re-reads the table and plans again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.arrays import FIELD_ID

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType


def _dotted(parent: tuple[str, ...], name: str) -> str:
    return ".".join((*parent, name))


@dataclass(frozen=True)
class AddColumn:
    """A DataFrame column (or a field of a struct, under ``parent``) the table lacks: added as optional."""

    name: str
    field_type: IcebergType
    parent: tuple[str, ...] = ()  # the table's names of the enclosing fields (``element``/``value`` included)

    @property
    def path(self) -> str:
        return _dotted(self.parent, self.name)

    def describe(self) -> str:
        return f"new {'field' if self.parent else 'column'} {self.path!r} ({self.field_type})"


@dataclass(frozen=True)
class WidenColumn:
    """A column (or nested field) whose values arrive in a wider type than the table's."""

    name: str
    field_id: int
    old_type: IcebergType
    new_type: IcebergType
    parent: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return _dotted(self.parent, self.name)

    def describe(self) -> str:
        return f"{'field' if self.parent else 'column'} {self.path!r} widened from {self.old_type} to {self.new_type}"


@dataclass(frozen=True)
class MakeOptional:
    """A required column (or nested field) that received nulls."""

    name: str
    field_id: int
    parent: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return _dotted(self.parent, self.name)

    def describe(self) -> str:
        return f"{'field' if self.parent else 'column'} {self.path!r} made optional"


SchemaChange = AddColumn | WidenColumn | MakeOptional


def can_promote(old: IcebergType, new: IcebergType) -> bool:
    """Iceberg's type promotions: values of ``old`` read back unchanged as ``new``."""
    from pyiceberg import types as it

    if isinstance(old, it.IntegerType) and isinstance(new, it.LongType):
        return True
    if isinstance(old, it.FloatType) and isinstance(new, it.DoubleType):
        return True
    if isinstance(old, it.DecimalType) and isinstance(new, it.DecimalType):
        return old.scale == new.scale and old.precision < new.precision
    return False


def apply_schema_changes(table: Table, changes: Sequence[SchemaChange]) -> Table:
    """Commit ``changes`` as one schema update; pyiceberg's ``CommitFailedException`` if the schema moved."""
    with table.update_schema() as update:
        for change in changes:
            # Paths as tuples: a name with a dot is one column, not a path into a struct.
            path = (*change.parent, change.name)
            if isinstance(change, AddColumn):
                update.add_column(path, change.field_type, required=False)
            elif isinstance(change, WidenColumn):
                update.update_column(path, field_type=change.new_type)
            else:
                update.make_column_optional(path)
    return table


def field_path(schema: Schema, field_id: int) -> tuple[tuple[int, str], ...]:
    """(field id, name) of each field from the top of ``schema`` down to ``field_id``."""
    parents = schema._lazy_id_to_parent  # nested field id → its parent's
    path = []
    current: int | None = field_id
    while current is not None:
        path.append((current, schema.find_field(current).name))
        current = parents.get(current)
    return tuple(reversed(path))


DROPPED_KEY_PREFIX = "__icesink_dropped_key_"


def with_dropped_keys(table: Table, schema: Schema, equality_ids: Iterable[int]) -> Schema:
    """``schema`` plus the top-level columns equality deletes are keyed on that were dropped from it since.

    Such a delete still removes rows of files written before the drop: reading them needs the key column
    (found in the table's older schemas, by field id). The extra columns are named apart from any
    column of the table; callers leave them out of what they return or write.
    """
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    missing = {i for i in equality_ids if schema.find_column_name(i) is None}
    extra: dict[int, NestedField] = {}
    for older in reversed(table.metadata.schemas):  # the newest schema that still had it
        for field in older.fields:
            if field.field_id in missing and field.field_id not in extra:
                extra[field.field_id] = NestedField(
                    field.field_id, f"{DROPPED_KEY_PREFIX}{field.field_id}", field.field_type, required=False
                )
    if not extra:
        return schema
    return Schema(*schema.fields, *extra.values(), schema_id=schema.schema_id)


def schema_by_id(table: Table, schema_id: int) -> Schema | None:
    return next((s for s in table.metadata.schemas if s.schema_id == schema_id), None)


def schema_in_files(table: Table, locations: Sequence[str]) -> Schema:
    """The table's current schema cut down to the fields every file at ``locations`` holds, by field id.

    What a checkpoint's files were written with, when their schema has since left
    the table's metadata (another tool's snapshot expiry may remove schemas no
    snapshot uses). A field keeps its id for life and Iceberg only lets its type
    be promoted, so the ids in the files' Parquet footers are all
    :func:`written_schema_problem` needs. Raises ``OSError`` when a file cannot be read.
    """
    import pyarrow.parquet as pq
    from pyiceberg.schema import prune_columns

    held: set[int] | None = None
    for location in locations:
        with table.io.new_input(location).open() as stream:
            ids = set(_field_ids(pq.ParquetFile(stream).schema_arrow))
        held = ids if held is None else held & ids
    return prune_columns(table.schema(), held or set(), select_full_types=False)


def _field_ids(fields: Iterable[pa.Field]) -> Iterator[int]:
    import pyarrow as pa

    for field in fields:
        raw = (field.metadata or {}).get(FIELD_ID)
        if raw is not None:
            yield int(raw)
        kind = field.type
        if isinstance(kind, pa.StructType):
            yield from _field_ids(kind.field(i) for i in range(kind.num_fields))
        elif isinstance(kind, pa.ListType | pa.LargeListType):
            yield from _field_ids([kind.value_field])
        elif isinstance(kind, pa.MapType):
            yield from _field_ids([kind.key_field, kind.item_field])


def written_schema_problem(
    current: Schema,
    written: Schema,
    null_counts: Mapping[int, int],
    equality_ids: Iterable[int] = (),
) -> str | None:
    """Why files written with ``written`` cannot be committed into a table at ``current``, or None.

    Files name their columns by field id: a column renamed since, added as
    optional, dropped, widened or made optional reads correctly from them. What
    does not: a column that is now required and which the files lack or hold
    nulls in (``null_counts``: field id → nulls over the checkpoint's data
    files), a type that is not a promotion of the written one, and equality
    deletes keyed on a column the table no longer has.
    """
    from pyiceberg.schema import index_by_id

    written_fields = index_by_id(written)
    parents = current._lazy_id_to_parent  # nested field id → its parent's
    for field_id, field in index_by_id(current).items():
        old = written_fields.get(field_id)
        parent = parents.get(field_id)
        name = current.find_column_name(field_id) or field.name
        if old is None:
            # A required field under a struct the files lack too is null with its struct: no problem there.
            if field.required and (parent is None or parent in written_fields):
                return f"{'field' if parent else 'column'} {name!r} is required now and its files do not have it"
            continue
        if parent is None and field.required and null_counts.get(field_id, 0) > 0:
            return f"column {name!r} is required now and its files hold {null_counts[field_id]} null(s)"
        if field.field_type.is_primitive != old.field_type.is_primitive or (
            field.field_type.is_primitive
            and old.field_type != field.field_type
            and not can_promote(old.field_type, field.field_type)
        ):
            kind = "field" if parent else "column"
            return f"{kind} {name!r} is {field.field_type} now and its files hold {old.field_type}"
    current_ids = set(index_by_id(current))
    for field_id in equality_ids:
        if field_id not in current_ids:
            name = written.find_column_name(field_id) or str(field_id)
            return f"its equality deletes are keyed on column {name!r}, which the table no longer has"
    return None


def schema_changes(table: Table, base_snapshot_id: int | None, snapshot_id: int, allow_widening: bool) -> list[str]:
    """How the schema of ``snapshot_id`` differs from the one of ``base_snapshot_id``, as problems of an audit.

    With ``allow_widening``, what loses nothing is no problem: a column added as optional, a promoted type, a
    required column made optional. A column dropped, renamed, narrowed or made required always is.
    """
    from pyiceberg.schema import index_by_id, index_name_by_id

    metadata = table.metadata

    def schema_at(snapshot: int | None) -> Schema:
        found = metadata.snapshot_by_id(snapshot) if snapshot is not None else None
        if found is not None and found.schema_id is not None:
            return metadata.schema_by_id(found.schema_id) or metadata.schema()
        return metadata.schema()

    if base_snapshot_id is None:
        return []  # the branch's first rows: nothing to compare with
    before, after = schema_at(base_snapshot_id), schema_at(snapshot_id)
    if before.schema_id == after.schema_id:
        return []
    old_fields, new_fields = index_by_id(before), index_by_id(after)
    old_names, new_names = index_name_by_id(before), index_name_by_id(after)
    problems = []
    for field_id, old in old_fields.items():
        name = old_names.get(field_id, old.name)
        new = new_fields.get(field_id)
        if new is None:
            problems.append(f"column {name!r} was dropped (schema {before.schema_id} to {after.schema_id})")
            continue
        if new_names.get(field_id) != name:
            problems.append(f"column {name!r} was renamed to {new_names.get(field_id)!r}")
        if new.field_type != old.field_type and not (new.field_type.is_primitive and old.field_type.is_primitive):
            continue  # nested types: their own fields are compared one by one
        if new.field_type != old.field_type:
            widened = can_promote(old.field_type, new.field_type)
            if not (widened and allow_widening):
                problems.append(f"column {name!r} changed type from {old.field_type} to {new.field_type}")
        if old.required != new.required:
            if new.required:
                problems.append(f"column {name!r} was made required")
            elif not allow_widening:
                problems.append(f"column {name!r} was made optional")
    for field_id, new in new_fields.items():
        if field_id in old_fields:
            continue
        name = new_names.get(field_id, new.name)
        if not allow_widening:
            problems.append(f"column {name!r} was added")
        elif new.required:
            problems.append(f"column {name!r} was added as a required column")
    return problems


def field_ids(schema: Schema) -> frozenset[int]:
    """Every field id of ``schema``, nested ones included."""
    from pyiceberg.schema import index_by_id

    return frozenset(index_by_id(schema))


def columns_beyond(started: Schema, known_ids: frozenset[int], later: Schema) -> list[str]:
    """What ``later`` holds that a reader fixed to ``started`` would lose or misread: columns (at any depth) added
    since (an id none of ``known_ids``), columns whose type was promoted since (their values may not fit the old
    type), and required columns made optional (nulls a reader of ``started`` takes for impossible). Columns
    dropped since, or in an older schema only, are none of these."""
    from pyiceberg.schema import index_by_id, index_name_by_id

    before_by_id, names = index_by_id(started), index_name_by_id(later)
    beyond = []
    for field_id, field in index_by_id(later).items():
        before = before_by_id.get(field_id)
        name = names.get(field_id, field.name)
        if field_id not in known_ids:
            beyond.append(f"column {name!r} was added")
        elif before is None:
            continue
        elif can_promote(before.field_type, field.field_type):
            beyond.append(f"column {name!r} changed type from {before.field_type} to {field.field_type}")
        elif before.required and not field.required:
            beyond.append(f"column {name!r} was made optional")
    return beyond
