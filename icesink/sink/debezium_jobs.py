"""The Spark job that writes a Debezium micro-batch's tables: each decoded record's table (its number, the
"target"), the records distributed by table and key, and the task that writes every table one after another
(:mod:`icesink.writer.json_tables`). The router's general way and its one-job write
(:mod:`icesink.sink.known_routes`) differ only in how a record finds its table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from icesink.debezium_events.decode_task import REJECTED
from icesink.debezium_events.route import OP_COLUMN, POSITION_COLUMN, RoutedTable
from icesink.sink.json_names import json_names
from icesink.writer.json_tables import MISSED, ROUTE, JsonTable, json_tables_task

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

    from icesink.sink.table_sink import PreparedWrite

_JOIN = "\u0001"  # between the parts of a route: no source name, key list or schema id holds it


def route_key(source: str, keys: str, schema_id: str) -> str:
    """A record's route: its source table, its key columns (JSON) and its Connect schema id."""
    return _JOIN.join((source, keys, schema_id))


def general_target(tables: Sequence[RoutedTable]) -> Column:
    """Each record's table by its source (the dead-letter table for a rejected record; none for a source of no
    table)."""
    numbers = {t.source.key: i for i, t in enumerate(tables) if t.source is not None}
    dead_letter = next((i for i, t in enumerate(tables) if t.dead_letter), None)
    # One literal, whatever the number of tables (a literal per key and number was two calls into the JVM a
    # table); Spark folds the constant once. Without a source table (every record of the micro-batch rejected)
    # there is no map to look in.
    by_source = F.from_json(F.lit(json.dumps(numbers)), "map<string,int>")
    other = by_source[F.col("source")] if numbers else F.lit(None)
    return F.when(F.col("source") == REJECTED, F.lit(dead_letter)).otherwise(other)


def one_job_target(numbers: str, table_of: str, tables: Sequence[RoutedTable]) -> tuple[Column, Column]:
    """Each record's table and route number in a one-job write (``numbers``: the known routes' numbers,
    ``table_of``: each route number's table, both JSON); MISSED for a record of no known route."""
    route = F.concat_ws(_JOIN, "source", "keys", "schema_id")
    number = F.coalesce(F.from_json(F.lit(numbers), "map<string,int>")[route], F.lit(MISSED))
    table = F.when(number >= 0, F.from_json(F.lit(table_of), "array<int>")[number])  # no index out of range
    dead_letter = next((i for i, t in enumerate(tables) if t.dead_letter), None)
    rejected = F.lit(dead_letter if dead_letter is not None else MISSED)
    return F.when(F.col("source") == REJECTED, rejected).otherwise(F.coalesce(table, F.lit(MISSED))), number


def spread_tables(tables: Sequence[RoutedTable], parallelism: int) -> list[int]:
    """The numbers of the tables spread over the tasks by key: those with a large share of the micro-batch."""
    share = sum(t.records for t in tables) / parallelism / 2
    return [i for i, t in enumerate(tables) if t.records > 0 and t.records >= share and not t.dead_letter]


def write_task_tables(tables: Sequence[RoutedTable], prepared: Sequence[PreparedWrite]) -> list[JsonTable]:
    """How the write task writes each table: its spec, and where its columns are in the JSON rows."""
    return [
        JsonTable(
            one.spec,
            json_names(one.projection, one.spec.columns),
            dead_letter=table.dead_letter,
            op_column=None if table.dead_letter else OP_COLUMN,
            position_column=None if table.dead_letter else POSITION_COLUMN,
        )
        for table, one in zip(tables, prepared, strict=True)
    ]


def write_task(
    tables: Sequence[RoutedTable], task_tables: Sequence[JsonTable]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    return json_tables_task(task_tables, next((i for i, t in enumerate(tables) if t.dead_letter), None))


def distributed(
    parsed: DataFrame, target: Column, tables: Sequence[RoutedTable], route: Column | None = None
) -> DataFrame:
    """The decoded records each with its table's number (``target``; a record without one is left out), every
    change of a key in one task, and a task's records sorted by table (the dead-letter table last, so that it takes
    what the others refused).

    A table holding a large share of the micro-batch is spread over the tasks by key; the others go whole to
    one task each, so that a small table gets one data file (and one delete file) per micro-batch, not one per
    task. A one-job write gives each record's ``route`` too (records of no known route are spread by key: a task
    only counts them).
    """

    parallelism = parsed.sparkSession.sparkContext.defaultParallelism
    spread = spread_tables(tables, parallelism)
    if route is not None:
        spread.append(MISSED)
    rows = parsed.select(
        target.cast("int").alias("target"),
        *([route.cast("int").alias(ROUTE)] if route is not None else []),
        "row",
        "op",
        "position",
        (F.col("schema_id") == "").alias("exact"),
        "topic",
        "partition",
        "offset",
        "raw_key",
        "raw_value",
        "key",
        "source_ms",
    ).where(F.col("target").isNotNull())
    within = F.when(F.col("target").isin(spread), F.col("key")).otherwise(F.lit("")) if spread else F.lit("")
    return rows.repartition(parallelism, "target", within.alias("spread")).sortWithinPartitions("target").drop("key")
