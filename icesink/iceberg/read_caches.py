"""What a process keeps between file reads: each file layout's schemas, and the row groups it read lately.

A change read touches the same files again and again: every upsert snapshot
names rows of the same base files, and a reader catching up reads many
snapshots in one Python worker (Spark reuses its workers across tasks and
micro-batches). A data file of a table never changes once committed, so a row
group decoded once serves every later read of it until the memory is wanted for
another. A location alone does not say which file it is (``add_files`` can attach
a regenerated file where an earlier one was): callers name a file by its table,
location, size and data sequence number (``read_data_file``'s ``kept_as``).
And pyiceberg's schema work for a file (converting the Parquet schema, pruning
it, projecting each batch by field id) costs more than decoding a small file,
while it depends only on the file's layout, which most files of a table share.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyarrow as pa
from pyiceberg.schema import Schema

# Layouts differ by schema version and writer, not by file: a few hundred cover any table's history.
LAYOUTS = 512
# Decoded row groups kept per process: a few base files' worth, small beside an executor's memory.
ROW_GROUP_BYTES = 128 * 1024 * 1024
# Footers kept per process (a schema and the row groups' first rows each): enough for a large table's files.
FOOTERS = 8192

V = TypeVar("V")


@dataclass(frozen=True)
class Footer:
    """What a read needs of a Parquet footer before it can use kept row groups: the schema, and the file
    position each row group starts at (the file's row count last)."""

    physical: pa.Schema
    starts: tuple[int, ...]
    # The schema serialized: it names the file's layout with its field ids (pyarrow's equality ignores them).
    schema_bytes: bytes

    @classmethod
    def of(cls, physical: pa.Schema, starts: tuple[int, ...]) -> Footer:
        return cls(physical, starts, physical.serialize().to_pybytes())


@dataclass(frozen=True)
class Layout:
    """A Parquet file layout as pyiceberg sees it: the file's schema, and the part of it a read takes."""

    file_schema: Schema
    projection: Schema
    key: tuple[object, ...]  # identifies the layout, the columns read and the schema they are read into


class Layouts:
    """Each layout's schemas, worked out once; and whether its batches need projecting or only new names."""

    def __init__(self, limit: int = LAYOUTS) -> None:
        self._limit = limit
        self._layouts: dict[tuple[object, ...], Layout] = {}
        self._relabel: dict[tuple[object, ...], pa.Schema | None] = {}
        self._lock = threading.Lock()

    def of(self, key: tuple[object, ...], make: Callable[[], tuple[Schema, Schema]]) -> Layout:
        """The layout for ``key`` (the physical schema's bytes, the name mapping, what is read), made once."""
        with self._lock:
            found = self._layouts.get(key)
        if found is not None:
            return found
        file_schema, projection = make()
        layout = Layout(file_schema, projection, key)
        with self._lock:
            if len(self._layouts) >= self._limit:
                self._layouts.clear()
                self._relabel.clear()
            self._layouts[key] = layout
        return layout

    def project(
        self, layout: Layout, batch: pa.RecordBatch, project: Callable[[pa.RecordBatch], pa.RecordBatch]
    ) -> pa.RecordBatch:
        """``project(batch)``; once a batch of this layout is known to come out as its own columns renamed,
        later ones are renamed without the per-column visit."""
        with self._lock:
            schema = self._relabel.get(layout.key, False)
        if isinstance(schema, pa.Schema):
            return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
        projected = project(batch)
        if schema is False and batch.num_rows:
            same = _same_columns(layout, batch, projected)
            with self._lock:
                self._relabel[layout.key] = projected.schema if same else None
        return projected


def _same_columns(layout: Layout, batch: pa.RecordBatch, projected: pa.RecordBatch) -> bool:
    """Whether ``projected`` is ``batch``'s own columns in order, only named as the table names them."""
    if batch.num_columns != projected.num_columns:
        return False
    if any(a.type != b.type for a, b in zip(batch.columns, projected.columns, strict=True)):
        return False
    return bool(pa.RecordBatch.from_arrays(batch.columns, schema=projected.schema).equals(projected))


class Kept(Generic[V]):
    """Values by key, least recently used first out, within ``limit`` (in the units ``size`` measures)."""

    def __init__(self, limit: int, size: Callable[[V], int] = lambda _: 1) -> None:
        self._limit = limit
        self._size = size
        self._held = 0
        self._values: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            found = self._values.get(key)
            if found is None:
                return None
            self._values.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: V) -> None:
        size = self._size(value)
        if size > self._limit // 4:
            return  # one huge value would push out everything else for a single reuse
        with self._lock:
            if key in self._values:
                return
            self._values[key] = (value, size)
            self._held += size
            while self._held > self._limit:
                _, (_, dropped) = self._values.popitem(last=False)
                self._held -= dropped


class RowGroups(Kept[list[pa.RecordBatch]]):
    """Decoded row groups within ``limit`` bytes."""

    def __init__(self, limit: int = ROW_GROUP_BYTES) -> None:
        super().__init__(limit, lambda batches: sum(b.nbytes for b in batches))


LAYOUT_CACHE = Layouts()
FOOTER_CACHE: Kept[Footer] = Kept(FOOTERS)
ROW_GROUP_CACHE = RowGroups()
