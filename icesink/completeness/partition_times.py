"""Which span of event time a partition holds, and when it is done: pure values, no pyiceberg.

A partition of a table partitioned by ``year``/``month``/``day``/``hour`` of a timestamp or date column, or by
identity on one, holds the rows of one span of time; it is done once the watermark reaches the span's end
(every row below the watermark has arrived, and every row of the partition is below the end). A partition of
several time fields holds the rows of their intersection, so its end is the earliest of their ends.
"""

from __future__ import annotations

import base64
import datetime
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote_plus, unquote_plus

from icesink.completeness.watermark import datetime_to_micros

_EPOCH_DATE = datetime.date(1970, 1, 1)
NULL_VALUE = "null"  # a partition value that is null, as Iceberg writes it in paths
_DAY = 86_400_000_000
_HOUR = 3_600_000_000


class TimeKind(enum.StrEnum):
    """What a time partition field's values count."""

    YEAR = "year"  # years since 1970
    MONTH = "month"  # months since 1970-01
    DAY = "day"  # days since 1970-01-01
    HOUR = "hour"  # hours since 1970-01-01T00
    DATE = "date"  # identity on a date column: days since 1970-01-01
    TIMESTAMP = "timestamp"  # identity on a timestamp column: microseconds since the epoch


# What each kind's values look like in partition paths (strptime alone would take 2026-3 for 2026-03).
_FORMS = {
    TimeKind.YEAR: re.compile(r"-?\d{4}"),
    TimeKind.MONTH: re.compile(r"\d{4}-\d{2}"),
    TimeKind.DAY: re.compile(r"\d{4}-\d{2}-\d{2}"),
    TimeKind.DATE: re.compile(r"\d{4}-\d{2}-\d{2}"),
    TimeKind.HOUR: re.compile(r"\d{4}-\d{2}-\d{2}-\d{2}"),
    TimeKind.TIMESTAMP: re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?"),
}


@dataclass(frozen=True)
class TimeField:
    """A partition field over time: its position in the partition tuple, its name and what its values count."""

    position: int
    name: str
    kind: TimeKind


def _month_start(months: int) -> int:
    year, month = divmod(months, 12)
    return datetime_to_micros(datetime.datetime(1970 + year, month + 1, 1))


def span_end(kind: TimeKind, value: int) -> int:
    """The end (exclusive, microseconds since the epoch) of the span a field's value holds."""
    if kind == TimeKind.YEAR:
        return _month_start((value + 1) * 12)
    if kind == TimeKind.MONTH:
        return _month_start(value + 1)
    if kind in (TimeKind.DAY, TimeKind.DATE):
        return (value + 1) * _DAY
    if kind == TimeKind.HOUR:
        return (value + 1) * _HOUR
    return value + 1  # one instant: done once the watermark is past it


def partition_end(fields: Sequence[TimeField], partition: Sequence[object]) -> int | None:
    """When the partition is done: the earliest end of its time fields' spans; None when it has no time field
    with a value (a null time value holds rows of no known time)."""
    ends = [
        span_end(f.kind, value)
        for f in fields
        if isinstance(value := partition[f.position], int) and not isinstance(value, bool)
    ]
    return min(ends) if ends else None


def human(kind: TimeKind, value: int) -> str:
    """A field's value as Iceberg writes it in partition paths: ``2026``, ``2026-11``, ``2026-11-25``,
    ``2026-11-25-10``, or an ISO timestamp."""
    if kind == TimeKind.YEAR:
        return f"{1970 + value:04d}"
    if kind == TimeKind.MONTH:
        year, month = divmod(value, 12)
        return f"{1970 + year:04d}-{month + 1:02d}"
    if kind in (TimeKind.DAY, TimeKind.DATE):
        return (_EPOCH_DATE + datetime.timedelta(days=value)).isoformat()
    if kind == TimeKind.HOUR:
        moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(hours=value)
        return moment.strftime("%Y-%m-%d-%H")
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=value)).isoformat()


def parse_human(kind: TimeKind, text: str) -> int:
    """The value :func:`human` writes as ``text``; :class:`ValueError` naming the form expected."""
    forms = {
        TimeKind.YEAR: "YYYY",
        TimeKind.MONTH: "YYYY-MM",
        TimeKind.DAY: "YYYY-MM-DD",
        TimeKind.DATE: "YYYY-MM-DD",
        TimeKind.HOUR: "YYYY-MM-DD-HH",
        TimeKind.TIMESTAMP: "YYYY-MM-DDTHH:MM:SS[.ffffff]",
    }
    if text == NULL_VALUE:
        raise ValueError(f"{text!r} holds the rows without a time, which no watermark reaches: it is never done")
    if not _FORMS[kind].fullmatch(text):
        raise ValueError(f"{text!r} is not a {kind.value} partition value; write it as {forms[kind]}")
    try:
        if kind == TimeKind.YEAR:
            return int(datetime.datetime.strptime(text, "%Y").year) - 1970
        if kind == TimeKind.MONTH:
            moment = datetime.datetime.strptime(text, "%Y-%m")
            return (moment.year - 1970) * 12 + moment.month - 1
        if kind in (TimeKind.DAY, TimeKind.DATE):
            return (datetime.date.fromisoformat(text) - _EPOCH_DATE).days
        if kind == TimeKind.HOUR:
            moment = datetime.datetime.strptime(text, "%Y-%m-%d-%H")
            return (moment - datetime.datetime(1970, 1, 1)) // datetime.timedelta(hours=1)
        return datetime_to_micros(datetime.datetime.fromisoformat(text).replace(tzinfo=None))
    except ValueError:
        raise ValueError(f"{text!r} is not a {kind.value} partition value; write it as {forms[kind]}") from None


def partition_path(fields: Mapping[int, tuple[str, TimeKind | None]], partition: Sequence[object]) -> str:
    """``name=value/…`` with time fields in their human form, as Iceberg names partition directories (names and
    other values URL-quoted, so a ``/`` or ``=`` in them cannot be read as a separator): what ``icesink
    partitions`` prints and ``icesink wait`` reads back (:func:`parse_partition_path`)."""
    parts = []
    for position, value in enumerate(partition):
        name, kind = fields[position]
        if value is None:
            shown = NULL_VALUE
        elif kind is not None and isinstance(value, int):
            shown = human(kind, value)
        elif isinstance(value, bytes):
            shown = quote_plus(base64.b64encode(value).decode("ascii"))  # as Iceberg's human form of binary
        else:
            shown = quote_plus(str(value))
        parts.append(f"{quote_plus(name)}={shown}")
    return "/".join(parts)


def parse_partition_path(text: str) -> dict[str, str]:
    """The field names and values of a partition named as :func:`partition_path` writes it; :class:`ValueError`
    for a part that is not ``name=value``."""
    values = {}
    for part in text.split("/"):
        name, equals, value = part.partition("=")
        if not name or not equals:
            raise ValueError(f"{part!r} in {text!r} is not field=value")
        values[unquote_plus(name.strip())] = unquote_plus(value.strip())
    return values
