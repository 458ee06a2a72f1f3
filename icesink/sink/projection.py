"""Matching a Spark schema with an Iceberg table schema: the projection of a DataFrame onto the table, or
the schema changes the table needs first, and the refusal texts.

Runs on the driver before the stream starts, so that a DataFrame that cannot
fit the table is refused with the column named, before any file is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg import types as it
from pyspark.sql import functions as F
from pyspark.sql import types as st

from icesink.errors import SchemaMismatchError
from icesink.iceberg.schemas import AddColumn, SchemaChange, WidenColumn, can_promote
from icesink.sink.columns import column
from icesink.spark_types import iceberg_type_of, spark_type_of

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType, NestedField
    from pyiceberg.types import StructType as StructTypeIceberg
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructField, StructType


# Joins the names of a nested field's path in the ledger's column → field id map. Top-level columns are
# their plain names there; no Spark or Iceberg name holds this control character in practice.
PATH_SEPARATOR = "\x1f"


def path_key(path: Sequence[str]) -> str:
    """A DataFrame field's path as a key of the column → field id map (a top-level column: its name)."""
    return PATH_SEPARATOR.join(path)


def _accepts(target: IcebergType, source: IcebergType) -> bool:
    """Can a value of ``source`` be stored in a column of ``target`` without loss?"""

    if target == source:
        return True
    # Iceberg types Spark lacks, filled from the type a user would use (checked per row by the writer).
    if isinstance(target, it.UUIDType):
        return isinstance(source, it.StringType | it.BinaryType)
    if isinstance(target, it.FixedType):
        return isinstance(source, it.BinaryType)
    if isinstance(target, it.DecimalType) and isinstance(source, it.DecimalType):
        return source.scale == target.scale and source.precision <= target.precision
    return can_promote(source, target)


@dataclass(frozen=True)
class ValuePlan:
    """How one DataFrame value becomes the table's: taken as it is, cast, or rebuilt field by field.

    ``kind`` is ``same``, ``cast`` (to ``spark_type``), ``null`` (a field the
    DataFrame lacks: nulls of ``spark_type``), ``struct`` (``fields``: table
    field name, DataFrame field name, plan), ``list`` (``element``) or ``map``
    (``key`` and ``element`` for the value).
    """

    kind: str = "same"
    spark_type: DataType | None = None
    fields: tuple[tuple[str, str | None, ValuePlan], ...] = ()
    element: ValuePlan | None = None
    key: ValuePlan | None = None

    def build(self, value: Column) -> Column:
        """The Spark expression that turns ``value`` into the table's shape."""

        if self.kind == "same":
            return value
        if self.kind in ("cast", "null"):
            assert self.spark_type is not None
            return (value if self.kind == "cast" else F.lit(None)).cast(self.spark_type)
        if self.kind == "struct":
            rebuilt = F.struct(
                *[
                    plan.build(value.getField(source) if source is not None else value).alias(name)
                    for name, source, plan in self.fields
                ]
            )
            # A null struct stays null: F.struct alone would make a struct of nulls of it.
            return F.when(value.isNull(), F.lit(None)).otherwise(rebuilt)
        assert self.element is not None
        if self.kind == "list":
            return F.transform(value, self.element.build)
        rebuilt = F.transform_values(value, lambda _, v: self.element.build(v))  # type: ignore[union-attr]
        if self.key is not None and self.key.kind != "same":
            rebuilt = F.transform_keys(rebuilt, lambda k, _: self.key.build(k))  # type: ignore[union-attr]
        return rebuilt


SAME = ValuePlan()


@dataclass(frozen=True)
class ColumnSource:
    """Where one table column's values come from in the DataFrame (None: written as nulls)."""

    name: str  # the table column
    field_id: int
    source: str | None
    plan: ValuePlan = SAME

    @property
    def cast(self) -> bool:
        """Whether the DataFrame's values need any change to be the table's."""
        return self.plan.kind != "same"


@dataclass(frozen=True)
class Projection:
    """How to turn each batch into the table's columns, in the table's order."""

    columns: tuple[ColumnSource, ...]
    passthrough: tuple[str, ...] = ()  # DataFrame columns the writer needs besides the table's
    nested_ids: tuple[tuple[str, int], ...] = ()  # nested DataFrame fields (as path_key) → field ids

    def apply(self, df: DataFrame, table_schema: Schema) -> DataFrame:
        selected: list[Column] = []
        for source, field in zip(self.columns, table_schema.fields, strict=True):
            if source.source is None:
                selected.append(F.lit(None).cast(spark_type_of(field.field_type)).alias(source.name))
            else:
                selected.append(source.plan.build(column(source.source)).alias(source.name))
        selected += [column(name) for name in self.passthrough]
        return df.select(*selected)

    @property
    def field_ids(self) -> dict[str, int]:
        """DataFrame column (or nested field, as :func:`path_key`) → the table field it was written to: what a
        rename in the table must not change."""
        return {**{c.source: c.field_id for c in self.columns if c.source is not None}, **dict(self.nested_ids)}


@dataclass(frozen=True)
class SchemaPlan:
    """A DataFrame matched with a table schema: the projection, or the changes the table needs first."""

    projection: Projection | None
    changes: tuple[SchemaChange, ...] = ()


def plan_projection(
    spark_schema: StructType,
    table_schema: Schema,
    table: str,
    passthrough: Sequence[str] = (),
    field_ids: Mapping[str, int] | None = None,
) -> Projection:
    """Check that the DataFrame fits the table as it is and say how to project it; raise naming the column."""
    plan = plan_schema(spark_schema, table_schema, table, passthrough, field_ids)
    if plan.changes:
        raise SchemaMismatchError(schema_refusal(table, plan.changes[0]))
    assert plan.projection is not None
    return plan.projection


def plan_schema(
    spark_schema: StructType,
    table_schema: Schema,
    table: str,
    passthrough: Sequence[str] = (),
    field_ids: Mapping[str, int] | None = None,
) -> SchemaPlan:
    """Match the DataFrame's columns with the table's, or list the (lossless) changes the table needs first.

    A DataFrame column this stream wrote before (``field_ids``: column → field
    id, from the schema of its last checkpoint) goes to the same field id, so
    that a column renamed in the table meanwhile keeps receiving its values;
    other columns match by name (exact first, then ignoring case), and so do
    the fields of structs, at any depth. What no evolution may do (a dropped
    column, a narrower or other type, a missing required field) raises
    :class:`SchemaMismatchError` naming the column.
    """
    data_fields = [f for f in spark_schema.fields if f.name not in passthrough]
    source_of = _match_columns(table, data_fields, table_schema, field_ids or {})
    new_columns = [f for f in data_fields if f.name not in {s.name for s in source_of.values()}]
    fitter = _Fitter(table, field_ids or {})
    columns: list[ColumnSource] = []
    for field in table_schema.fields:
        source = source_of.get(field.field_id)
        if source is None:
            if field.required:
                raise SchemaMismatchError(
                    f"table {table}: required column {field.name!r} ({field.field_type}) is missing from the "
                    f"DataFrame (columns: {', '.join(f.name for f in data_fields) or 'none'}); add it to the DataFrame"
                )
            columns.append(ColumnSource(field.name, field.field_id, None))
            continue
        plan = fitter.fit(field.field_type, source.dataType, (field.name,), field.field_id, (source.name,))
        columns.append(ColumnSource(field.name, field.field_id, source.name, plan))
    changes = [*fitter.changes, *(AddColumn(f.name, iceberg_type_of(f.dataType, f.name, table)) for f in new_columns)]
    if changes:
        return SchemaPlan(None, tuple(changes))
    return SchemaPlan(Projection(tuple(columns), tuple(passthrough), tuple(sorted(fitter.nested_ids.items()))))


class _Fitter:
    """Fits DataFrame values to table fields, recursively, collecting the changes the table needs.

    ``path`` names a field as the table does, ``source`` as the DataFrame does;
    ``known`` holds the field ids nested DataFrame fields were written to before.
    """

    def __init__(self, table: str, known: Mapping[str, int]) -> None:
        self._table = table
        self._known = known
        self.changes: list[SchemaChange] = []
        self.nested_ids: dict[str, int] = {}

    def fit(
        self,
        target: IcebergType,
        spark_type: DataType,
        path: tuple[str, ...],
        field_id: int,
        source: tuple[str, ...],
    ) -> ValuePlan:
        dotted = ".".join(path)
        if isinstance(target, it.StructType):
            if not isinstance(spark_type, st.StructType):
                raise self._mismatch(dotted, target, spark_type)
            return self._fit_struct(target, spark_type, path, source)
        if isinstance(target, it.ListType):
            if not isinstance(spark_type, st.ArrayType):
                raise self._mismatch(dotted, target, spark_type)
            element = self.fit(
                target.element_type, spark_type.elementType, (*path, "element"), target.element_id, (*source, "element")
            )
            return SAME if element.kind == "same" else ValuePlan("list", element=element)
        if isinstance(target, it.MapType):
            if not isinstance(spark_type, st.MapType):
                raise self._mismatch(dotted, target, spark_type)
            key = self.fit(target.key_type, spark_type.keyType, (*path, "key"), target.key_id, (*source, "key"))
            value = self.fit(
                target.value_type, spark_type.valueType, (*path, "value"), target.value_id, (*source, "value")
            )
            if key.kind == "same" and value.kind == "same":
                return SAME
            return ValuePlan("map", element=value, key=key)
        if isinstance(spark_type, st.StructType | st.ArrayType | st.MapType):
            raise self._mismatch(dotted, target, spark_type)
        actual = iceberg_type_of(spark_type, dotted, self._table)
        if _accepts(target, actual):
            # uuid and fixed arrive as Spark strings or binaries; the writer converts and checks them.
            if actual == target or isinstance(target, it.UUIDType | it.FixedType):
                return SAME
            return ValuePlan("cast", spark_type=spark_type_of(target))
        if can_promote(target, actual):
            self.changes.append(WidenColumn(path[-1], field_id, target, actual, path[:-1]))
            return SAME
        raise self._mismatch(dotted, target, spark_type)

    def _fit_struct(
        self, target: StructTypeIceberg, spark_type: StructType, path: tuple[str, ...], source: tuple[str, ...]
    ) -> ValuePlan:
        known = {f.name: self._known[k] for f in spark_type.fields if (k := path_key((*source, f.name))) in self._known}
        sources = _match_struct_fields(self._table, ".".join(path), spark_type, target, known)
        matched = {id(f) for f in sources.values()}
        fields: list[tuple[str, str | None, ValuePlan]] = []
        for field in target.fields:
            spark_field = sources.get(field.field_id)
            if spark_field is None:
                if field.required:
                    raise SchemaMismatchError(
                        f"table {self._table}: required field {'.'.join((*path, field.name))!r} "
                        f"({field.field_type}) is missing from the DataFrame's struct; add it to the DataFrame"
                    )
                fields.append((field.name, None, ValuePlan("null", spark_type=spark_type_of(field.field_type))))
                continue
            field_source = (*source, spark_field.name)
            self.nested_ids[path_key(field_source)] = field.field_id
            plan = self.fit(field.field_type, spark_field.dataType, (*path, field.name), field.field_id, field_source)
            fields.append((field.name, spark_field.name, plan))
        for spark_field in spark_type.fields:
            if id(spark_field) not in matched:
                added = iceberg_type_of(spark_field.dataType, ".".join((*path, spark_field.name)), self._table)
                self.changes.append(AddColumn(spark_field.name, added, path))
        in_order = [name for name, _, _ in fields] == [f.name for f in spark_type.fields]
        if in_order and all(source_name == name and plan.kind == "same" for name, source_name, plan in fields):
            return SAME
        return ValuePlan("struct", fields=tuple(fields))

    def _mismatch(self, path: str, target: IcebergType, spark_type: DataType) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"table {self._table}: column {path!r} is {_said(target)} in the table but {_spark_said(spark_type)} in "
            "the DataFrame, which is neither the same type nor a widening Iceberg allows (int to long, float to "
            "double, a decimal's precision); cast it in the DataFrame",
            column=path,
            table_type=str(target),
        )


def _match_struct_fields(
    table: str, path: str, spark_type: StructType, target: StructTypeIceberg, known: Mapping[str, int]
) -> dict[int, StructField]:
    """Table field id → the DataFrame struct field that fills it (see :func:`_match`)."""
    return _match(table, list(spark_type.fields), list(target.fields), known, "field", f"{path}.")


def _match_columns(
    table: str, data_fields: list[StructField], table_schema: Schema, field_ids: Mapping[str, int]
) -> dict[int, StructField]:
    """Table field id → the DataFrame column that fills it (see :func:`_match`)."""
    return _match(table, data_fields, list(table_schema.fields), field_ids, "column", "")


def _match(
    table: str,
    spark_fields: list[StructField],
    targets: list[NestedField],
    known: Mapping[str, int],
    noun: str,
    prefix: str,
) -> dict[int, StructField]:
    """Table field id → the DataFrame field that fills it, matched in three passes, at the top level and in
    structs alike.

    First the fields this stream wrote before (``known``: DataFrame name → field id), to the same field
    whatever it is called now (a field dropped since is found again only when one of that name was added
    back); then exact names; then names ignoring case. Two DataFrame fields that would fill one table field
    are an error naming both. ``noun`` (column or field) and ``prefix`` (the struct's path) are for messages.
    """
    by_id = {f.field_id: f for f in targets}
    by_name = {f.name: f for f in targets}
    by_lower = {f.name.lower(): f for f in targets}
    source_of: dict[int, StructField] = {}
    how: dict[int, str] = {}
    unmatched: list[StructField] = []
    for spark_field in spark_fields:
        field_id = known.get(spark_field.name)
        if field_id is None:
            unmatched.append(spark_field)
            continue
        target = by_id.get(field_id) or by_name.get(spark_field.name)
        if target is None:
            raise SchemaMismatchError(
                f"table {table}: {noun} {prefix + spark_field.name!r} (field id {field_id}), which this stream "
                f"writes, was dropped from the table by someone else; icesink never re-creates a dropped {noun}. "
                f"Nothing of this batch was written: add a {noun} of that name back to the table, or drop it from "
                "the DataFrame, and restart the stream"
            )
        source_of[target.field_id] = spark_field
        how[target.field_id] = f"which this stream has written to it (as {target.name!r} now)"
    for lookup, key, way in ((by_name, str, "by name"), (by_lower, str.lower, "by name ignoring case")):
        rest = []
        for spark_field in unmatched:
            target = lookup.get(key(spark_field.name))
            if target is None:
                rest.append(spark_field)
                continue
            if target.field_id in source_of:
                other = source_of[target.field_id].name
                raise SchemaMismatchError(
                    f"table {table}: DataFrame {noun}s {other!r} ({how[target.field_id]}) and "
                    f"{spark_field.name!r} ({way}) would both fill table {noun} {prefix + target.name!r}; nothing "
                    "of this batch was written: rename or drop one of them in the DataFrame"
                )
            source_of[target.field_id] = spark_field
            how[target.field_id] = way
        unmatched = rest
    return source_of


def _said(kind: IcebergType) -> str:
    """An Iceberg type as a refusal names it, the two kinds of timestamp told apart."""
    return "timestamp (without a zone)" if isinstance(kind, it.TimestampType) else str(kind)


def _spark_said(kind: DataType) -> str:
    """A Spark type as a refusal names it: Spark's ``timestamp`` has a zone (Iceberg's timestamptz)."""
    if isinstance(kind, st.TimestampType):
        return "timestamp (with a zone: Iceberg's timestamptz)"
    return kind.simpleString()


def schema_refusal(table: str, change: SchemaChange) -> str:
    """Why a DataFrame does not fit a table that icesink may not evolve."""
    if isinstance(change, AddColumn):
        return (
            f"table {table}: DataFrame {'field' if change.parent else 'column'} {change.path!r} ({change.field_type}) "
            "is not in the table; drop it from the DataFrame, add it to the table first, or pass "
            "evolve_schema=True to add it as an optional field"
        )
    if isinstance(change, WidenColumn):
        return (
            f"table {table}: column {change.path!r} is {change.old_type} in the table but {change.new_type} in the "
            f"DataFrame; cast it to {change.old_type} in the DataFrame, or pass evolve_schema=True to widen the "
            "table's column"
        )
    return (
        f"table {table}: column {change.path!r} is required but receives nulls; fix the input, or pass "
        "evolve_schema=True to make the column optional"
    )
