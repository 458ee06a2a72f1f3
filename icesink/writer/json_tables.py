"""One task writing the change rows of several tables, given as JSON: the write of a Debezium micro-batch.

The driver hands every table's rows to one Spark job, distributed by (table, key) and sorted by table, so a
task meets its tables one after another and holds one table's rows at a time. Each table's rows are typed
exactly by :mod:`icesink.writer.json_rows` and written by that table's own :class:`TaskWriter` (its schema,
partition spec and open-file budget), which collapses a key's changes to the last. The task returns one
:class:`WriteResult` per table it wrote, tagged with the table's number.

A value its column cannot hold exactly stops the task with an error naming the table, checkpoint, column,
value and the Kafka record; with a dead-letter table, a record that still carries its bytes (one without a
schema) goes there instead, and the rest of its table is written without it.
"""

from __future__ import annotations

import base64
import decimal
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from icesink import fast_json
from icesink.errors import BadRowError, naming_table
from icesink.results import WriteResult, encode_write_result
from icesink.writer.files import delete_files
from icesink.writer.json_rows import JsonNames, RefusedValue, rows_to_arrow
from icesink.writer.spec import WriterSpec
from icesink.writer.task import TaskWriter

# The columns the task reads, as the driver names them.
TARGET = "target"  # the table's number in the task's list
ROW = "row"  # the row as JSON (for a rejected record: why it was rejected)
OP = "op"
POSITION = "position"
EXACT = "exact"  # the row is JSON as the source wrote it: its numbers are read digit for digit
LOCATION_COLUMNS = ("topic", "partition", "offset")
SOURCE_MS = "source_ms"  # source.ts_ms: the change's time in the source database (a Debezium stream's event time)
# The columns a table's rows carry for its event times (read by the task writer, not written).
EVENT_TIME_COLUMN = "__icesink_event_time"
SPLIT_COLUMNS = ("topic", "partition")
RAW_COLUMNS = ("raw_key", "raw_value")
# A task's output, a row per table it met: its result (None: no rows left to write), the rows it set aside for the
# dead-letter table, and the records it got and the routes they came by (numbers the driver gave, in a one-job
# write; see :mod:`icesink.sink.known_routes`).
OUTPUT_DDL = "target int, write_result binary, rejected long, records long, routes array<int>"
ROUTE = "route"  # the number of a record's route, in a one-job write
# The target of a record no table of the task takes (a one-job write met a route it does not know): it sorts
# before every table, so the task meets such records first and writes nothing (see
# :mod:`icesink.sink.known_routes`); its one output counts them in place of rejected records.
MISSED = -1
OVERSIZED = -2  # a task's one output when a table kept whole had more records than its max_records
_SPLIT_TYPES = (pa.string(), pa.int32())
# One table's output of a task: (table number, encoded result, rejected, records, routes), as OUTPUT_DDL says.
Output = tuple[int, bytes | None, int, int, list[int]]
ORDER = "__icesink_order"


@dataclass(frozen=True)
class JsonTable:
    """One table of the task: how to write it, and where each column's values are in its JSON rows."""

    spec: WriterSpec
    names: JsonNames = field(default_factory=JsonNames)
    dead_letter: bool = False  # rows of rejected records: (topic, partition, offset, key, value, error)
    op_column: str | None = None  # the change columns the spec's ChangeSpec reads, as the rows carry them
    position_column: str | None = None
    # In a one-job write, a table kept whole in one task: the most records the task takes of it before it gives
    # the micro-batch back (OVERSIZED), so that a burst of one table never sits in one task's memory.
    max_records: int | None = None


def json_tables_task(
    tables: Sequence[JsonTable], dead_letter: int | None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function writing the rows of ``tables`` (``dead_letter``: the number of the dead-letter
    table among them, which takes what the others reject)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = _Task(
            tables,
            dead_letter,
            context.partitionId() if context else 0,
            context.attemptNumber() if context else 0,
        )
        outputs = task.run(batches)
        yield pa.record_batch(
            [
                pa.array([o[0] for o in outputs], pa.int32()),
                pa.array([o[1] for o in outputs], pa.binary()),
                pa.array([o[2] for o in outputs], pa.int64()),
                pa.array([o[3] for o in outputs], pa.int64()),
                pa.array([o[4] for o in outputs], pa.list_(pa.int32())),
            ],
            names=["target", "write_result", "rejected", "records", "routes"],
        )

    return run


class _Task:
    def __init__(self, tables: Sequence[JsonTable], dead_letter: int | None, task_id: int, attempt: int) -> None:
        self._tables = tables
        self._dead_letter = dead_letter
        self._task_id = task_id
        self._attempt = attempt
        self._rejected: list[dict[str, Any]] = []  # records the write refused, for the dead-letter table
        self._written: list[tuple[WriterSpec, WriteResult]] = []

    def run(self, batches: Iterable[pa.RecordBatch]) -> list[Output]:
        outputs: list[Output] = []
        try:
            current: int | None = None
            rows: list[dict[str, Any]] = []
            missed = 0
            oversized: int | None = None
            limit: int | None = None
            for batch in batches:
                if not batch.num_rows or oversized is not None:  # the rest is read, not written
                    continue
                if missed or batch.column(TARGET)[0].as_py() == MISSED:
                    missed += sum(1 for target in batch.column(TARGET).to_pylist() if target == MISSED)
                    continue
                for record in batch.to_pylist():
                    target = record[TARGET]
                    if target != current:
                        if current is not None:
                            outputs.append(self._table(current, rows))
                        current, rows, limit = target, [], self._tables[target].max_records
                    rows.append(record)
                    if limit is not None and len(rows) > limit:
                        oversized = target
                        break
            if missed:
                return [(MISSED, None, 0, missed, [])]
            if oversized is not None:
                self._let_go()
                return [(OVERSIZED, None, 0, oversized, [])]
            if current is not None:
                outputs.append(self._table(current, rows))
            if self._rejected and self._dead_letter is not None and current != self._dead_letter:
                outputs.append(self._table(self._dead_letter, []))
            return outputs
        except BaseException:
            # A failed attempt leaves no files behind; the retry writes its own.
            self._let_go()
            raise

    def _let_go(self) -> None:
        for spec, result in self._written:
            delete_files([*result.data_files, *result.delete_files], spec.storage_options)
        self._written = []

    def _table(self, target: int, records: list[dict[str, Any]]) -> Output:
        routes = sorted({r[ROUTE] for r in records if r.get(ROUTE) is not None and r[ROUTE] >= 0})
        written, rejected = self._written_of(target, records)
        return target, written, rejected, len(records), routes

    def _written_of(self, target: int, records: list[dict[str, Any]]) -> tuple[bytes | None, int]:
        with naming_table(self._tables[target].spec.table_name):
            return self._written_of_table(target, records)

    def _written_of_table(self, target: int, records: list[dict[str, Any]]) -> tuple[bytes | None, int]:
        table = self._tables[target]
        if table.dead_letter:
            rows = [_rejected_row(r) for r in records] + self._rejected
            rejected = len(self._rejected)
            self._rejected = []
            arrow = self._arrow(table, rows, records)
        else:
            rows = [_parse(r) for r in records]
            arrow, rejected = self._typed(table, rows, records)
        if arrow.num_rows == 0:
            return None, rejected
        writer = TaskWriter(table.spec, self._task_id, self._attempt)
        try:
            writer.write(arrow)
            result = writer.complete()
        except BaseException:
            writer.abort()
            raise
        self._written.append((table.spec, result))
        return encode_write_result(result), rejected

    def _typed(
        self, table: JsonTable, rows: list[dict[str, Any]], records: list[dict[str, Any]]
    ) -> tuple[pa.Table, int]:
        """The table's rows as Arrow; a refused record goes to the dead-letter table where it can (see module)."""
        rejected = 0
        while True:
            try:
                return self._arrow(table, rows, records), rejected
            except RefusedValue as e:
                record = records[e.row]
                problem = (
                    f"table {table.spec.table_name}, checkpoint {table.spec.checkpoint_id}: the record at "
                    f"{_location(record)}: column {e.path!r} holds {_shown(e.value)}, {e.problem}"
                )
                if self._dead_letter is None or record.get("raw_value") is None:
                    raise BadRowError(f"{problem}. {_advice(record.get('raw_value') is None)}") from None
                self._rejected.append(
                    {**{c: record.get(c) for c in LOCATION_COLUMNS}, **_raw(record), "error": problem}
                )
                rejected += 1
                del rows[e.row], records[e.row]

    def _arrow(self, table: JsonTable, rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> pa.Table:
        spec = table.spec
        arrays = rows_to_arrow(spec.columns, rows, table.names)
        names = [c.name for c in spec.columns]
        if table.op_column is not None:
            arrays.append(pa.array([r[OP] for r in records], pa.string()))
            names.append(table.op_column)
        if table.position_column is not None:
            arrays.append(pa.array([r[POSITION] for r in records], pa.string()))
            names.append(table.position_column)
        if spec.changes is not None:
            arrays.append(pa.array(range(len(rows)), pa.int64()))  # input order: the last tie-breaker
            names.append(spec.changes.order_column)
        if spec.event_time is not None:
            arrays.append(pa.array([r.get(SOURCE_MS) for r in records], pa.int64()).cast(pa.timestamp("ms", "UTC")))
            names.append(EVENT_TIME_COLUMN)
            arrays += [
                pa.array([r.get(c) for r in records], t) for c, t in zip(SPLIT_COLUMNS, _SPLIT_TYPES, strict=True)
            ]
            names += SPLIT_COLUMNS
        return pa.Table.from_arrays(arrays, names=names)


def _parse(record: dict[str, Any]) -> dict[str, Any]:
    text = record[ROW]
    if record.get(EXACT):
        return fast_json.loads(text, exact_numbers=True)  # type: ignore[no-any-return]
    return fast_json.loads(text)  # type: ignore[no-any-return]


def _rejected_row(record: dict[str, Any]) -> dict[str, Any]:
    return {**{c: record.get(c) for c in LOCATION_COLUMNS}, **_raw(record), "error": record[ROW]}


def _raw(record: dict[str, Any]) -> dict[str, str | None]:
    """Key and value as the dead-letter table's JSON rows spell bytes (base64)."""
    return {
        name: None if record.get(column) is None else base64.b64encode(record[column]).decode("ascii")
        for name, column in (("key", "raw_key"), ("value", "raw_value"))
    }


def _location(record: dict[str, Any]) -> str:
    return f"topic {record.get('topic')}, partition {record.get('partition')}, offset {record.get('offset')}"


def _advice(has_schema: bool) -> str:
    if has_schema:
        return (
            "Nothing of the micro-batch was written. The record's own schema holds the value, and the table "
            "took its type; the column's type (set by another tool) refuses it: change the column's type, or "
            "map the source to another table"
        )
    return (
        "Nothing of the micro-batch was written. Fix the record at the source, or pass "
        "icesink.debezium(dead_letter='namespace.table') to set such records aside and go on"
    )


def _shown(value: Any) -> str:
    """A value as its JSON spelling shows it (a number's digits, a string quoted)."""
    text = str(value) if isinstance(value, decimal.Decimal) else repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


def result_rows(rows: Iterable[Any]) -> Iterator[Output]:
    """The task outputs a collect gives, as :data:`Output` tuples."""
    for row in rows:
        yield row[0], row[1], row[2], row[3], list(row[4] or ())
