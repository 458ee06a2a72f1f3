"""How far a table is complete, and waiting until a partition is done: ``icesink.watermark``,
``icesink.wait_for_partition`` and the record behind ``icesink partitions``.

All of it is read from the tables themselves (their snapshots' ``icesink.watermark``), so it answers the same
whichever process committed, and several tables are read at one moment of the catalog (a consistent cut).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from icesink.completeness.durations import DurationError, duration_micros
from icesink.completeness.partition_times import TimeKind, parse_human, parse_partition_path, span_end
from icesink.completeness.watermark import micros_to_datetime
from icesink.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.partition_record import PartitionStatus


def _table(table: str | Table, catalog: str | CatalogConfig | Mapping[str, str] | None) -> Table:
    if not isinstance(table, str):
        return table
    from icesink.catalog.config import resolve_catalog
    from icesink.catalog.loader import load_table, open_catalog

    config = resolve_catalog(catalog)
    return load_table(open_catalog(config), config, table)


def _check_branch(table: Table, branch: str) -> None:
    if branch not in table.metadata.refs and table.metadata.refs:
        name = ".".join(table.name())
        raise ConfigError(f"table {name} has no branch {branch!r} (it has {', '.join(sorted(table.metadata.refs))})")


def watermark(
    table: str | Table,
    branch: str = "main",
    catalog: str | CatalogConfig | Mapping[str, str] | None = None,
) -> datetime.datetime | None:
    """The table's event-time watermark as an aware ``datetime`` (UTC), or None before the first.

    It is the ``icesink.watermark`` of the newest snapshot on ``branch``'s ancestry that holds one: every row
    whose event time is below it has arrived (give or take the stream's ``lateness``). Snapshots of other tools
    hold none and are passed over.

    Args:
        table: ``namespace.table`` (looked up in ``catalog``) or a pyiceberg ``Table``.
        branch: the branch whose history to read.
        catalog: as for :func:`icesink.stream`.
    """
    from icesink.iceberg.watermarks import recorded_watermark

    loaded = _table(table, catalog)
    _check_branch(loaded, branch)
    micros = recorded_watermark(loaded.metadata, branch)
    return micros_to_datetime(micros) if micros is not None else None


def partition_end(table: Table, partition: str | Mapping[str, str], branch: str = "main") -> int:
    """When the partition named (``"ts_day=2026-11-25"``, several fields joined by ``/``, as ``icesink
    partitions`` prints them; or a dict) is done: the end of the span its time fields over the watermark's column
    hold, in microseconds.

    A :class:`ConfigError` names a field the table does not partition by, a value not of its field's form, a
    null time, and a partition that names no time field of the watermark's column.
    """
    from icesink.iceberg.partition_history import recorded_event_field, spec_fields

    name = ".".join(table.name())
    given = _named_values(partition, name)
    event_field = recorded_event_field(table, branch)
    kinds: dict[str, TimeKind | None] = {}
    counted: set[str] = set()  # the fields over the watermark's column (all time fields while none is known)
    for spec_id in table.metadata.specs():
        every = spec_fields(table, spec_id)
        over = spec_fields(table, spec_id, event_field, every_time_field=event_field is None)
        for position, (field_name, kind) in every.items():
            kinds[field_name] = kind
            if over[position][1] is not None:
                counted.add(field_name)
    if not kinds:
        raise ConfigError(f"table {name} is not partitioned, so it has no partitions to wait for")
    ends = []
    for field_name, text in given.items():
        if field_name not in kinds:
            raise ConfigError(
                f"table {name}: it has no partition field {field_name!r} (its fields: {', '.join(kinds)})"
            )
        kind = kinds[field_name]
        if kind is None or field_name not in counted:
            continue  # another field: every partition of this span is done at the same moment
        try:
            ends.append(span_end(kind, parse_human(kind, text)))
        except ValueError as e:
            raise ConfigError(f"table {name}: partition field {field_name!r}: {e}") from None
    if not ends:
        named = ", ".join(sorted(counted)) if counted else None
        raise ConfigError(
            f"table {name}: partition {partition!r} names no time partition field of the column its watermark is "
            "about, so nothing says when it is done; "
            + (f"name one of {named}" if named else "the table is not partitioned by time on that column")
        )
    return min(ends)


def _named_values(partition: str | Mapping[str, str], table: str) -> dict[str, str]:
    if isinstance(partition, Mapping):
        return {str(k): str(v) for k, v in partition.items()}
    if not isinstance(partition, str) or "=" not in partition:
        raise ConfigError(
            f"table {table}: name a partition as field=value, as `icesink partitions {table}` prints it "
            f"(e.g. ts_day=2026-11-25), not {partition!r}"
        )
    try:
        return parse_partition_path(partition)
    except ValueError as e:
        raise ConfigError(f"table {table}: {e}") from None


def partition_done(
    tables: str | Sequence[str],
    partition: str | Mapping[str, str],
    branch: str = "main",
    catalog: str | CatalogConfig | Mapping[str, str] | None = None,
) -> bool:
    """Whether the partition is done in every one of ``tables``, read at one moment of the catalog."""
    from icesink.catalog.config import resolve_catalog
    from icesink.catalog.loader import open_catalog, table_at
    from icesink.catalog.pointers import read_pointers
    from icesink.iceberg.watermarks import recorded_watermark

    names = [tables] if isinstance(tables, str) else list(tables)
    if not names:
        raise ConfigError("wait_for_partition needs at least one table")
    config = resolve_catalog(catalog)
    catalog_handle = open_catalog(config)
    pointers = read_pointers(config, names)  # one statement: a consistent cut of the tables
    loaded = [table_at(catalog_handle, name, pointers[name]) for name in names]
    for table in loaded:
        _check_branch(table, branch)
    ends = [partition_end(table, partition, branch) for table in loaded]  # every table's mistake, in any order
    for table, end in zip(loaded, ends, strict=True):
        reached = recorded_watermark(table.metadata, branch)
        if reached is None or reached < end:
            return False
    return True


def wait_for_partition(
    tables: str | Sequence[str],
    partition: str | Mapping[str, str],
    timeout: str | datetime.timedelta | None = None,
    poll: str | datetime.timedelta = "2 seconds",
    branch: str = "main",
    catalog: str | CatalogConfig | Mapping[str, str] | None = None,
) -> bool:
    """Wait until the partition is done in every one of ``tables`` at one moment of the catalog: True once it is,
    False when ``timeout`` passes first (None: wait for ever).

    A partition is done when the table's watermark (``icesink.watermark``) has reached the end of the span its
    time fields hold, so every row of it that was not late is committed. Several tables are checked at one
    consistent cut: True means a reader of the catalog sees all of them done at once.

    Args:
        tables: one ``namespace.table``, or several.
        partition: ``"ts_day=2026-11-25"`` as ``icesink partitions`` prints it (fields joined by ``/``), or a dict.
        timeout: how long to wait, e.g. ``"2 hours"``.
        poll: how often to look.
        branch: the branch to read.
        catalog: as for :func:`icesink.stream`.
    """
    try:
        limit = duration_micros(timeout) / 1e6 if timeout is not None else None
        every = max(duration_micros(poll) / 1e6, 0.05)
    except DurationError as e:
        raise ConfigError(f"wait_for_partition: {e}") from None
    deadline = time.monotonic() + limit if limit is not None else None
    while True:
        if partition_done(tables, partition, branch, catalog):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(every if deadline is None else max(0.0, min(every, deadline - time.monotonic())))


def partition_statuses(
    table: str, branch: str = "main", catalog: str | CatalogConfig | Mapping[str, str] | None = None
) -> list[PartitionStatus]:
    """Every partition of the table's branch with its state (open, done, changed after done), brought up to the
    branch's head first."""
    from icesink.catalog.config import resolve_catalog
    from icesink.catalog.loader import load_table, open_catalog
    from icesink.catalog.partition_record import PartitionRecord

    config = resolve_catalog(catalog)
    loaded = load_table(open_catalog(config), config, table)
    _check_branch(loaded, branch)
    record = PartitionRecord(config)
    record.keep_up(loaded, table, branch)
    return record.statuses(table, branch)
