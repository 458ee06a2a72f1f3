"""Built-in checks for write-audit-publish: ``icesink.stream(..., branch="audit", audit=[checks.not_null("id")])``.

A check is any callable taking one :class:`~icesink.audit.inputs.AuditInput` (``.added``: the rows a branch
snapshot added, as a ``pyarrow.Table``; ``.table``, ``.snapshot_id``, ``.checkpoint_id``) and returning a list of
problems as strings, empty when it passes. The built-ins below are such callables. They read only what the
snapshot added, so their cost follows the micro-batch, not the table. Each problem says how many rows are
concerned and shows a few of them, with the table's key columns.

Columns are named as in the table; a nested field by its path with dots (``customer.id``), a top-level
column whose name holds dots by that name.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icesink.audit.added_rows import (
    EXAMPLES,
    MissingColumn,
    column_values,
    examples,
    indices_of,
    missing_column,
    short,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema

    from icesink.audit.inputs import AuditInput

__all__ = ["in_range", "matches", "not_null", "rows_written", "schema_unchanged", "unique"]


@dataclass(frozen=True, init=False)
class not_null:  # a function's name, as checks are called
    """No added row has a null in any of ``columns`` (a nested field is null when its parent is)."""

    columns: tuple[str, ...]

    def __init__(self, *columns: str) -> None:
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise TypeError(f"not_null takes one or more column names, not {columns!r}")
        object.__setattr__(self, "columns", tuple(columns))

    def __call__(self, audit: AuditInput) -> list[str]:
        import pyarrow.compute as pc

        problems = []
        for column in self.columns:
            try:
                values = column_values(audit.added, column)
            except MissingColumn:
                problems.append(missing_column(audit.added, column, str(self)))
                continue
            found = indices_of(pc.is_null(values))
            if found:
                problems.append(
                    f"{len(found)} of {audit.added.num_rows} added row(s) have a null {column}, e.g. "
                    + examples(audit, audit.added, found, [column])
                )
        return problems

    def describe(self) -> dict[str, object]:
        return {"check": "not_null", "columns": list(self.columns)}

    def reads(self, schema: Schema) -> list[str] | None:
        return _top_level(schema, self.columns)

    def __str__(self) -> str:
        return f"not_null({', '.join(self.columns)})"


@dataclass(frozen=True, init=False)
class unique:
    """No two added rows share the values of ``columns`` (within what the snapshot added: for a keyed table the
    key is unique in the table already)."""

    columns: tuple[str, ...]

    def __init__(self, *columns: str) -> None:
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise TypeError(f"unique takes one or more column names, not {columns!r}")
        object.__setattr__(self, "columns", tuple(columns))

    def __call__(self, audit: AuditInput) -> list[str]:
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = audit.added
        try:
            keyed = pa.table({f"k{i}": column_values(rows, c) for i, c in enumerate(self.columns)})
        except MissingColumn as e:
            return [missing_column(rows, str(e), str(self))]
        names = keyed.column_names
        try:
            counts = keyed.group_by(names, use_threads=False).aggregate([([], "count_all")])
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            return [f"{self}: its columns cannot be compared for equality ({e}); name columns of plain values"]
        repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
        if repeated.num_rows == 0:
            return []
        extra = sum(repeated.column("count_all").to_pylist()) - repeated.num_rows
        shown = repeated.slice(0, EXAMPLES).to_pylist()
        described = "; ".join(
            "("
            + ", ".join(f"{c}: {short(one[n])}" for c, n in zip(self.columns, names, strict=True))
            + ")"
            + f" {one['count_all']} times"
            for one in shown
        )
        return [
            f"{repeated.num_rows} value(s) of ({', '.join(self.columns)}) occur more than once among the "
            f"{rows.num_rows} added row(s) ({extra} duplicate row(s)), e.g. {described}"
        ]

    def describe(self) -> dict[str, object]:
        return {"check": "unique", "columns": list(self.columns)}

    def reads(self, schema: Schema) -> list[str] | None:
        return _top_level(schema, self.columns)

    def __str__(self) -> str:
        return f"unique({', '.join(self.columns)})"


Bound = int | float | decimal.Decimal | datetime.date | datetime.datetime | str


@dataclass(frozen=True)
class in_range:
    """Every added row's ``column`` lies within ``[min, max]`` (either may be None: no bound). A null is not in
    any range: combine with ``not_null`` or not as the column allows; nulls are not counted here."""

    column: str
    min: Bound | None = None
    max: Bound | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise TypeError(f"in_range takes a column name, not {self.column!r}")
        if self.min is None and self.max is None:
            raise TypeError(f"in_range({self.column!r}) needs min=, max= or both")

    def __call__(self, audit: AuditInput) -> list[str]:
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            values = column_values(audit.added, self.column)
        except MissingColumn:
            return [missing_column(audit.added, self.column, str(self))]
        try:
            low = pc.less(values, _bound(self.min, values.type)) if self.min is not None else None
            high = pc.greater(values, _bound(self.max, values.type)) if self.max is not None else None
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as e:
            return [f"{self}: its bounds do not compare with column {self.column} of type {values.type} ({e})"]
        both = low is not None and high is not None
        outside = pc.or_(low, high) if both else (low if low is not None else high)
        if pa.types.is_floating(values.type):  # NaN is in no range (and compares false with every bound)
            outside = pc.or_kleene(outside, pc.is_nan(values))
        found = indices_of(outside) if outside is not None else []
        if not found:
            return []
        return [
            f"{len(found)} of {audit.added.num_rows} added row(s) have {self.column} outside {self._bounds()}, e.g. "
            + examples(audit, audit.added, found, [self.column])
        ]

    def _bounds(self) -> str:
        low = "-inf" if self.min is None else repr(self.min)
        high = "+inf" if self.max is None else repr(self.max)
        return f"[{low}, {high}]"

    def describe(self) -> dict[str, object]:
        return {"check": "in_range", "column": self.column, "min": _plain(self.min), "max": _plain(self.max)}

    def reads(self, schema: Schema) -> list[str] | None:
        return _top_level(schema, [self.column])

    def __str__(self) -> str:
        return f"in_range({self.column}, {self._bounds()})"


@dataclass(frozen=True)
class matches:
    """Every added row satisfies ``predicate``, written as a row filter of pyiceberg (``"amount >= 0 and status in
    ('open', 'paid')"``). A row for which it is not true (false, or null because of a null) is a problem."""

    predicate: str

    def __post_init__(self) -> None:
        if not isinstance(self.predicate, str) or not self.predicate.strip():
            raise TypeError(f'matches takes a predicate as text, e.g. "amount >= 0", not {self.predicate!r}')

    def __call__(self, audit: AuditInput) -> list[str]:
        from icesink.iceberg.row_filters import PredicateError, rows_not_matching

        try:
            found = rows_not_matching(audit.added, audit.table.schema(), self.predicate)
        except PredicateError as e:
            return [f"{self}: {e}"]
        if not found:
            return []
        return [
            f"{len(found)} of {audit.added.num_rows} added row(s) do not satisfy {self.predicate!r}, e.g. "
            + examples(audit, audit.added, found, [])
        ]

    def describe(self) -> dict[str, object]:
        return {"check": "matches", "predicate": self.predicate}

    def reads(self, schema: Schema) -> list[str] | None:
        from icesink.iceberg.row_filters import predicate_columns

        return predicate_columns(schema, self.predicate)

    def __str__(self) -> str:
        return f"matches({self.predicate!r})"


@dataclass(frozen=True)
class rows_written:
    """The rows the snapshots added (their summaries) equal the rows the stream's tasks wrote for their
    checkpoints: no file was lost or added on the way from the executors to the table."""

    def __call__(self, audit: AuditInput) -> list[str]:
        if audit.written_rows is None or audit.committed_rows is None:
            return []  # another tool's snapshot alone, or checkpoints the ledger no longer holds
        if audit.written_rows == audit.committed_rows:
            return []
        return [
            f"the stream's tasks wrote {audit.written_rows} row(s) for checkpoint(s) up to {audit.checkpoint_id}, "
            f"but the snapshots added {audit.committed_rows}"
        ]

    def describe(self) -> dict[str, object]:
        return {"check": "rows_written"}

    def reads(self, schema: Schema) -> list[str] | None:
        return []

    def __str__(self) -> str:
        return "rows_written()"


@dataclass(frozen=True)
class schema_unchanged:
    """The table's schema at the snapshot is the one at the base, or, with ``allow_widening`` (default), only
    widened: columns added as optional, types promoted (int to long, float to double, a decimal's precision),
    required columns made optional. A column dropped, renamed or narrowed is a problem."""

    allow_widening: bool = True

    def __call__(self, audit: AuditInput) -> list[str]:
        from icesink.iceberg.schemas import schema_changes

        return schema_changes(audit.table, audit.base_snapshot_id, audit.snapshot_id, self.allow_widening)

    def describe(self) -> dict[str, object]:
        return {"check": "schema_unchanged", "allow_widening": self.allow_widening}

    def reads(self, schema: Schema) -> list[str] | None:
        return []

    def __str__(self) -> str:
        return f"schema_unchanged(allow_widening={self.allow_widening})"


def _bound(value: object, column: pa.DataType) -> pa.Scalar:
    """A bound as Arrow compares it with the column: a float as a double, so that 1.5 against an integer column stays
    1.5 (Arrow compares them as doubles); anything else in the column's own type (a date, a timestamp, a decimal)."""
    import pyarrow as pa

    if isinstance(value, float):
        return pa.scalar(value, pa.float64())
    return pa.scalar(value, type=column)


BUILT_INS = (not_null, unique, in_range, matches, rows_written, schema_unchanged)


def columns_read(checks: Sequence[object], schema: Schema) -> list[str] | None:
    """The top-level columns these checks read, with the table's key columns (their examples name rows by them);
    None (every column) when a check is not a built-in or names a column it cannot find (it says so itself)."""
    needed: set[str] = set()
    for check in checks:
        reads = check.reads(schema) if isinstance(check, BUILT_INS) else None
        if reads is None:
            return None
        needed.update(reads)
    needed.update(schema.identifier_field_names())
    return [f.name for f in schema.fields if f.name in needed]


def _top_level(schema: Schema, paths: Sequence[str]) -> list[str] | None:
    """The top-level column each path starts in (names may hold dots); None if one is in none."""
    names = [f.name for f in schema.fields]
    found = []
    for path in paths:
        parts = path.split(".")
        top = next((".".join(parts[:end]) for end in range(len(parts), 0, -1) if ".".join(parts[:end]) in names), None)
        if top is None:
            return None
        found.append(top)
    return found


def _plain(value: object) -> object:
    """A bound as JSON keeps it: numbers and text as they are, others as ISO text."""
    if value is None or isinstance(value, int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"date": value.isoformat()}
    return str(value)


def _unplain(value: object) -> Any:
    if isinstance(value, Mapping):
        if "decimal" in value:
            return decimal.Decimal(str(value["decimal"]))
        if "datetime" in value:
            return datetime.datetime.fromisoformat(str(value["datetime"]))
        if "date" in value:
            return datetime.date.fromisoformat(str(value["date"]))
    return value


def from_description(described: Mapping[str, object]) -> Callable[[AuditInput], list[str]] | None:
    """The built-in check a recorded description names, made again; None for a check of your own."""
    kind = described.get("check")
    columns = [str(c) for c in described.get("columns", ()) or ()]  # type: ignore[attr-defined]
    if kind == "not_null":
        return not_null(*columns)
    if kind == "unique":
        return unique(*columns)
    if kind == "in_range":
        return in_range(str(described["column"]), _unplain(described.get("min")), _unplain(described.get("max")))
    if kind == "matches":
        return matches(str(described["predicate"]))
    if kind == "rows_written":
        return rows_written()
    if kind == "schema_unchanged":
        return schema_unchanged(bool(described.get("allow_widening", True)))
    return None
