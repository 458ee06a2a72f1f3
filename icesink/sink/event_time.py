"""A stream's ``event_time``, ``lateness`` and ``split_by`` resolved against its DataFrame and table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.types import ArrayType, DateType, MapType, StructType, TimestampNTZType, TimestampType

from icesink.completeness.durations import duration_micros
from icesink.errors import ConfigError
from icesink.table_options import Late
from icesink.writer.spec import EventTimeSpec

if TYPE_CHECKING:
    from icesink.sink.options import StreamOptions
    from icesink.sink.projection import Projection

# Spark's Kafka source names a record's split so; a DataFrame holding both is split by them unless told otherwise.
KAFKA_SPLIT_COLUMNS = ("topic", "partition")


@dataclass(frozen=True)
class EventTimeSettings:
    """Where a table's rows hold their event time and split (the DataFrame's column names), and the lateness
    allowed them, in microseconds."""

    column: str
    lateness: int
    split_columns: tuple[str, ...]
    watermark_column: str | None = None  # watermark_from: the watermark follows this column's largest value
    set_aside_late: bool = False  # late="dead_letter": late rows go to the stream's dead-letter table

    @property
    def columns(self) -> tuple[str, ...]:
        """The DataFrame columns the write tasks read: the event time's, the splits' and the watermark's."""
        watermark = (self.watermark_column,) if self.watermark_column is not None else ()
        return tuple(dict.fromkeys((self.column, *self.split_columns, *watermark)))

    def spec(self, projection: Projection, late_before: int | None) -> EventTimeSpec:
        """What the write tasks observe, named as the projected rows name the columns (a table column under
        the table's name, which another tool may have changed; any other column under the DataFrame's)."""
        named = {c.source: c.name for c in projection.columns if c.source is not None}
        watermark = self.watermark_column
        return EventTimeSpec(
            named.get(self.column, self.column),
            tuple(named.get(c, c) for c in self.split_columns),
            late_before,
            named.get(watermark, watermark) if watermark is not None else None,
            self.set_aside_late,
        )


def resolve_event_time(options: StreamOptions, schema: StructType) -> EventTimeSettings | None:
    """The stream's event-time settings, or a :class:`ConfigError` naming the column where they do not fit."""
    if options.event_time is None and options.watermark_from is None:
        return None
    identifier = options.table
    watermark = _time_column(schema, options.watermark_from, identifier, "watermark_from")
    column = _time_column(schema, options.event_time, identifier, "event_time") or watermark
    assert column is not None
    set_aside = options.late == Late.DEAD_LETTER
    if watermark is not None:  # the upstream's watermark is already the whole table's
        return EventTimeSettings(column, 0, (), watermark, set_aside)
    splits = _split_columns(options.split_by, schema, identifier)
    lateness = duration_micros(options.lateness) if options.lateness is not None else 0
    return EventTimeSettings(column, lateness, splits, set_aside_late=set_aside)


def _time_column(schema: StructType, name: str | None, identifier: str, option: str) -> str | None:
    if name is None:
        return None
    column = _column(schema, name, identifier, option)
    kind = schema[column].dataType
    if not isinstance(kind, TimestampType | TimestampNTZType | DateType):
        raise ConfigError(
            f"table {identifier}: {option} column {column!r} is {kind.simpleString()}, not a timestamp or a date; "
            "convert it in the DataFrame (F.timestamp_millis for epoch milliseconds, F.to_timestamp for text)"
        )
    return column


def _split_columns(given: Sequence[str] | None, schema: StructType, identifier: str) -> tuple[str, ...]:
    if given is None:
        names = set(schema.names)
        return KAFKA_SPLIT_COLUMNS if all(c in names for c in KAFKA_SPLIT_COLUMNS) else ()
    columns = tuple(dict.fromkeys(_column(schema, c, identifier, "split_by") for c in given))
    for name in columns:
        kind = schema[name].dataType
        if isinstance(kind, StructType | ArrayType | MapType):
            raise ConfigError(
                f"table {identifier}: split_by column {name!r} is {kind.simpleString()}; a split is named by plain "
                "values (a topic, a partition number): name top-level columns of strings, numbers or times"
            )
    return columns


def _column(schema: StructType, name: str, identifier: str, option: str) -> str:
    """The DataFrame's column of this name: exactly, else the one column matching it in another case."""
    if name in schema.names:
        return name
    folded = [c for c in schema.names if c.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise ConfigError(
        f"table {identifier}: {option} names column {name!r}, which the DataFrame "
        + ("holds in several cases" if folded else "does not have")
        + f" (its columns: {', '.join(schema.names)}); name a top-level column of the stream's DataFrame"
    )
