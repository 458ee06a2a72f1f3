"""The table a stream with ``late="dead_letter"`` sets its late rows aside in: its schema, its settings, and a
micro-batch's late rows as its rows.

Late rows are rows of several tables, of several schemas, so the dead-letter table holds each as a line of
JSON (the row as its table would have got it) beside what an operator needs to take it back: the table it was
for, its event time, the watermark it missed, the checkpoint, and the Kafka topic, partition and offset when
the stream has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql import types as T

from icesink.catalog.config import resolve_catalog
from icesink.catalog.loader import open_catalog
from icesink.completeness.watermark import format_watermark
from icesink.errors import ConfigError
from icesink.sink.columns import column
from icesink.sink.options import StreamOptions
from icesink.sink.preflight import preflight
from icesink.sink.tables import table_exists
from icesink.table_options import Late, TableOptions, Writer
from icesink.writer.late_rows import MICROS_COLUMN, late_rows_task

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from icesink.sink.sink_settings import SinkSettings
    from icesink.writer.spec import EventTimeSpec

LATE_ROWS_SCHEMA = T.StructType(
    [
        T.StructField("table", T.StringType()),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("watermark", T.TimestampType()),
        T.StructField("checkpoint_id", T.LongType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("row", T.StringType()),
        T.StructField("error", T.StringType()),
    ]
)
# Times in the row's JSON to the microsecond (Spark's default drops the last three digits), in UTC written as
# icesink.watermark is, whatever the session's zone.
_JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSxxx",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "timeZone": "UTC",
    "ignoreNullFields": "false",
}
# Spark's Kafka source's columns, copied when a late row still has them (and of their type).
_KAFKA_COLUMNS = (("topic", T.StringType()), ("partition", T.IntegerType()), ("offset", T.LongType()))


def sets_late_rows_aside(options: Sequence[TableOptions]) -> bool:
    """Whether any table of the stream sets its late rows aside (and the stream needs its dead-letter table)."""
    return any(o.late == Late.DEAD_LETTER for o in options)


def check_dead_letter(dead_letter: str | None, options: Sequence[StreamOptions], where: str) -> None:
    """``dead_letter`` and ``late="dead_letter"`` go together, and the dead-letter table is none of the targets."""
    if dead_letter is None:
        return
    if not sets_late_rows_aside(options):
        raise ConfigError(
            f"{where}: dead_letter takes the late rows of a table with late='dead_letter'; give a table "
            "event_time=... and late='dead_letter' too, or leave dead_letter out"
        )
    if any(o.table == dead_letter for o in options):
        raise ConfigError(
            f"{where}: dead_letter names {dead_letter}, a table the stream writes; late rows go to a table of "
            "their own, name another"
        )


def dead_letter_settings(df: DataFrame, options: StreamOptions) -> tuple[SinkSettings, bool]:
    """The dead-letter table's settings (found, or created pending: in the catalog with its first late rows),
    checked now: a table that does not fit late rows stops the stream before it starts. The flag says whether
    the table was created here (the caller drops it again if the stream is refused)."""
    identifier = options.dead_letter
    assert identifier is not None
    # The stream's own options, with those of a table that takes appends on main (rows to look at, not to publish).
    own = options.joined(
        identifier,
        TableOptions(create_table=True, writer=Writer.ARROW),
        publish=None,
        on_audit_failure="continue",
    )
    config = resolve_catalog(options.catalog)
    existed = table_exists(open_catalog(config, pending_tables=True), config, identifier)
    empty = df.sparkSession.createDataFrame([], LATE_ROWS_SCHEMA)
    settings, _ = preflight(empty, own, deferred=True)
    if settings.changes is not None:
        raise ConfigError(
            f"table {identifier}: it is the stream's dead_letter table, which takes every late row as a row of its "
            "own, but it has identifier fields, so rows would replace each other. Name a new table as dead_letter "
            "(icesink creates it), or drop the table's identifier fields"
        )
    return settings, not existed


def late_rows(projected: DataFrame, spec: EventTimeSpec, identifier: str, checkpoint_id: int) -> DataFrame:
    """The rows of ``projected`` (a micro-batch as its table's write tasks get it) that arrived below the
    watermark, decided as those tasks decide, as rows of the dead-letter table."""
    assert spec.late_before is not None
    names = projected.columns
    # Placeholder names, as for the write: pyspark looks each column up by a name it parses.
    positional = projected.select(*[column(n).alias(f"_{i}") for i, n in enumerate(names)])
    # A new schema: StructType.add would change the DataFrame's own.
    handed_back = T.StructType([*positional.schema.fields, T.StructField(MICROS_COLUMN, T.LongType())])
    late = positional.mapInArrow(late_rows_task(spec, identifier, names), handed_back)
    kinds = {name: late.schema[f"_{i}"].dataType for i, name in enumerate(names)}
    watermark = format_watermark(spec.late_before)
    row = F.struct(*[F.col(f"_{i}").alias(n) for i, n in enumerate(names)])
    return late.select(
        F.lit(identifier).alias("table"),
        F.timestamp_micros(F.col(MICROS_COLUMN)).alias("event_time"),
        F.timestamp_micros(F.lit(spec.late_before)).alias("watermark"),
        F.lit(checkpoint_id).cast(T.LongType()).alias("checkpoint_id"),
        *[_kafka(name, kind, names, kinds) for name, kind in _KAFKA_COLUMNS],
        F.to_json(row, _JSON_OPTIONS).alias("row"),
        F.lit(
            f"table {identifier}, checkpoint {checkpoint_id}: the row's event time ({spec.column}) is below the "
            f"watermark {watermark} its micro-batch started with; set aside by late='dead_letter'"
        ).alias("error"),
    )


def _kafka(name: str, kind: T.DataType, names: list[str], kinds: dict[str, T.DataType]) -> Column:
    if name in kinds and kinds[name] == kind:
        return F.col(f"_{names.index(name)}").alias(name)
    return F.lit(None).cast(kind).alias(name)
