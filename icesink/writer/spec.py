"""What an executor needs to know to write files for one table and checkpoint.

The driver builds a :class:`WriterSpec` from the Iceberg table and ships it to
the executors inside the task closure; it holds plain values only, so the
executors import neither pyiceberg nor a catalog client.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa

from icesink.arrays import FIELD_ID

_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_FIXED = re.compile(r"fixed\[(\d+)\]")


NESTED = ("struct", "list", "map")


@dataclass(frozen=True)
class ColumnSpec:
    """A field of the table: Iceberg field id, name, type and nullability.

    ``iceberg_type`` is a primitive's name (``long``, ``decimal(9, 2)``) or one of
    ``struct``, ``list`` and ``map``, whose fields are ``children``: a struct's
    fields, a list's element, a map's key and value (named as Parquet names
    them: ``element``, ``key``, ``value``).
    """

    field_id: int
    name: str
    iceberg_type: str
    required: bool
    children: tuple[ColumnSpec, ...] = ()

    @property
    def is_nested(self) -> bool:
        return self.iceberg_type in NESTED

    def leaves(self, steps: tuple[tuple[int, str], ...] = ()) -> Iterator[Leaf]:
        """The primitive fields under this one, depth first, in Parquet's column order."""
        here = (*steps, (self.field_id, self.name))
        if not self.is_nested:
            yield Leaf(here, self, in_repeated=False)
            return
        for child in self.children:
            for leaf in child.leaves(here):
                yield leaf if self.iceberg_type == "struct" else replace(leaf, in_repeated=True)

    def pruned(self, keep: frozenset[int]) -> ColumnSpec | None:
        """This field with only the primitive fields in ``keep`` (and the structs holding them), or None."""
        if not self.is_nested:
            return self if self.field_id in keep else None
        children = tuple(c for c in (child.pruned(keep) for child in self.children) if c is not None)
        return replace(self, children=children) if children else None


@dataclass(frozen=True)
class Leaf:
    """A primitive field and the (field id, name) steps that lead to it from the top of the table."""

    steps: tuple[tuple[int, str], ...]
    column: ColumnSpec
    in_repeated: bool  # inside a list or map: Iceberg keeps no bounds for it

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.steps)

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class PartitionFieldSpec:
    """One partition field: which column it reads and which transform it applies."""

    field_id: int
    name: str
    source_id: int
    transform: str


@dataclass(frozen=True)
class ChangeSpec:
    """How rows of a keyed change stream are read: which key, which operation, which order.

    Attributes:
        equality_field_ids: field ids of the key columns (the delete files' ``equality_ids``).
        op_column: the column holding the operation, or None for plain upserts.
        op_kinds: raw operation value → ``insert`` / ``update`` / ``delete``.
        sequence_column: orders changes of one key within a checkpoint (the last wins).
        order_column: input position, added by the driver: breaks ties deterministically.
    """

    equality_field_ids: tuple[int, ...]
    op_column: str | None = None
    op_kinds: tuple[tuple[str, str], ...] = (("I", "insert"), ("U", "update"), ("D", "delete"))
    sequence_column: str | None = None
    order_column: str = "__icesink_order"


@dataclass(frozen=True)
class EventTimeSpec:
    """Which columns of a task's rows hold the event time and the split (a stream with ``event_time``), and
    where late begins: ``late_before`` is the watermark the micro-batch started with, in microseconds."""

    column: str
    split_columns: tuple[str, ...] = ()
    late_before: int | None = None
    watermark_column: str | None = None  # holds the upstream watermark the stream's follows (watermark_from)
    set_aside_late: bool = False  # late="dead_letter": late rows are counted, not written (the dead-letter job is)


# With no level set, Iceberg Java's writer (parquet-mr) compresses zstd at 3 and gzip at zlib's 6; pyarrow's
# own defaults are 1 and 9. Both of icesink's writers use parquet-mr's, so that a table's files do not
# depend on which writer wrote them.
PARQUET_MR_LEVELS = {"zstd": 3, "gzip": 6}


@dataclass(frozen=True)
class Compression:
    """A Parquet codec and the level the table sets for it (None: the level Iceberg Java would use).

    ``codec`` is one of ``zstd``, ``snappy``, ``gzip``, ``lz4_raw``, ``brotli``, ``none``.
    """

    codec: str = "zstd"
    level: int | None = None

    @property
    def effective_level(self) -> int | None:
        """The level files get: the table's, else the one Iceberg Java would use (None: the codec has none)."""
        return self.level if self.level is not None else PARQUET_MR_LEVELS.get(self.codec)

    def for_pyarrow(self) -> tuple[str, int | None]:
        """pyarrow's codec name and the level to pass it (pyarrow's ``lz4`` writes LZ4_RAW)."""
        return ("lz4" if self.codec == "lz4_raw" else self.codec), self.effective_level


# The table property icesink.write.max-open-files, unset.
MAX_OPEN_FILES_DEFAULT = 100


@dataclass(frozen=True)
class WriterSpec:
    """Everything a write task needs; built on the driver, read on executors."""

    table_name: str
    data_location: str
    columns: tuple[ColumnSpec, ...]
    partition_fields: tuple[PartitionFieldSpec, ...]
    spec_id: int
    job_id: str
    checkpoint_id: int = -1
    target_file_size_bytes: int = 512 * 1024 * 1024
    row_group_rows: int = 1024 * 1024
    row_group_bytes: int = 128 * 1024 * 1024
    max_open_files: int = MAX_OPEN_FILES_DEFAULT  # per task, across its partitions
    compression: Compression = Compression()
    delete_compression: Compression = Compression()  # of equality delete files
    # Object-store settings, credentials among them: never part of a repr, log line or error message.
    storage_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    changes: ChangeSpec | None = None
    schema_id: int = 0  # the table schema the columns come from, recorded with the checkpoint
    # evolve_schema=True: a required column (never a key) may receive nulls; the driver makes it optional.
    nulls_in_required: bool = False
    # Parquet bloom filters of data files: (column path, false-positive probability) per column.
    bloom_filters: tuple[tuple[str, float], ...] = ()
    # A stream with event_time: its tasks report what they saw of the event times (icesink.writer.event_times).
    event_time: EventTimeSpec | None = None

    def bloom_filter_options(self) -> dict[str, dict[str, float | int]] | None:
        """pyarrow's ``bloom_filter_options`` for a data file.

        pyarrow sizes each filter for its row group's distinct values, at most ``ndv``. Without ``ndv`` it sizes
        them the same, but takes 10-25 ms more per file, and a micro-batch into many keyed tables writes a file per
        table. So ``ndv`` is the row-group limit: a row group within it gets the filter pyarrow writes without
        ``ndv``, byte for byte (a larger one, which a task's keyed rows can make, one sized for the limit).
        """
        return {path: {"fpp": fpp, "ndv": self.row_group_rows} for path, fpp in self.bloom_filters} or None

    def for_checkpoint(self, checkpoint_id: int) -> WriterSpec:
        return replace(self, checkpoint_id=checkpoint_id)

    def column_by_id(self, field_id: int) -> ColumnSpec:
        """A top-level column by field id."""
        for column in self.columns:
            if column.field_id == field_id:
                return column
        raise KeyError(field_id)

    def leaves(self) -> tuple[Leaf, ...]:
        """Every primitive field of the table, in Parquet's column order."""
        return tuple(leaf for column in self.columns for leaf in column.leaves())

    def leaf_by_id(self, field_id: int) -> Leaf:
        for leaf in self.leaves():
            if leaf.column.field_id == field_id:
                return leaf
        raise KeyError(field_id)

    @property
    def equality_field_ids(self) -> tuple[int, ...]:
        return self.changes.equality_field_ids if self.changes else ()

    @property
    def equality_leaves(self) -> tuple[Leaf, ...]:
        """The key fields of a change stream: top-level columns or primitive fields inside structs."""
        if self.changes is None:
            return ()
        return tuple(self.leaf_by_id(fid) for fid in self.changes.equality_field_ids)

    @property
    def delete_columns(self) -> tuple[ColumnSpec, ...]:
        """The columns of equality delete files: the key fields, inside their structs."""
        keep = frozenset(self.equality_field_ids)
        return tuple(p for p in (c.pruned(keep) for c in self.columns) if p is not None)

    def may_hold_nulls(self, column: ColumnSpec) -> bool:
        """Whether the column's values may be null in this checkpoint's files."""
        if not column.required:
            return True
        return self.nulls_in_required and column.field_id not in self.equality_field_ids

    def arrow_schema(self, columns: tuple[ColumnSpec, ...] | None = None) -> pa.Schema:
        """The Arrow schema of data files (or of files of ``columns``), carrying Iceberg field ids for Parquet."""
        return pa.schema([arrow_field(c, nullable=self.may_hold_nulls(c)) for c in columns or self.columns])


def arrow_type(iceberg_type: str, children: tuple[ColumnSpec, ...] = ()) -> pa.DataType:
    """The Arrow type that Parquet files of this Iceberg type are written with (field ids all the way down)."""
    if iceberg_type == "struct":
        return pa.struct([arrow_field(c) for c in children])
    if iceberg_type == "list":
        (element,) = children
        return pa.list_(arrow_field(element))
    if iceberg_type == "map":
        key, value = children
        return pa.map_(arrow_field(key), arrow_field(value))
    simple = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
        "string": pa.string(),
        "binary": pa.binary(),
        "time": pa.time64("us"),
        "uuid": pa.uuid(),
    }
    if iceberg_type in simple:
        return simple[iceberg_type]
    match = _DECIMAL.fullmatch(iceberg_type)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    match = _FIXED.fullmatch(iceberg_type)
    if match:
        return pa.binary(int(match.group(1)))
    raise ValueError(f"Iceberg type {iceberg_type!r} is not supported by the icesink writer")


def arrow_field(column: ColumnSpec, nullable: bool | None = None) -> pa.Field:
    return pa.field(
        column.name,
        arrow_type(column.iceberg_type, column.children),
        nullable=not column.required if nullable is None else nullable,
        metadata={FIELD_ID: str(column.field_id).encode()},
    )
