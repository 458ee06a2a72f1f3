"""``icesink.debezium(...)``: where a stream of Debezium change events puts each source table, and how."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from icesink.completeness.durations import DurationError, duration_micros
from icesink.debezium_events.sources import SourceTable
from icesink.errors import ConfigError
from icesink.properties import check_user_properties
from icesink.table_options import TableOptions, refuse_wrong_types


@dataclass(frozen=True)
class Debezium:
    """``tables=`` for a stream of Debezium change events (see :func:`debezium`)."""

    namespace: str
    names: Mapping[str, str] = field(default_factory=dict)
    partition_by: Mapping[str, Sequence[str]] = field(default_factory=dict)  # by table: its own partitioning
    # The options of every table the stream writes (table_properties, evolve_schema, maintain); its key, change
    # columns, partitioning and writer are set per table as it is seen.
    table_options: TableOptions = field(default_factory=lambda: TableOptions(evolve_schema=True))
    dead_letter: str | None = None  # the table of records that cannot be applied; None: they stop the stream

    @property
    def tables(self) -> Mapping[str, str]:
        """The ``tables=`` mappings given (source table -> table)."""
        return self.names

    @property
    def table_properties(self) -> Mapping[str, str] | None:
        return self.table_options.table_properties

    @property
    def evolve_schema(self) -> bool:
        return self.table_options.evolve_schema

    @property
    def maintain(self) -> bool:
        return self.table_options.maintain

    def identifier(self, source: SourceTable) -> str:
        """The Iceberg table of a source table: a mapping's, else ``namespace.<table>`` (a table named with a
        dot, ``a.b``, goes to ``namespace.a.b``: table ``b`` of namespace ``namespace.a``)."""
        for name in source.names:
            if name in self.names:
                return self.names[name]
        return f"{self.namespace}.{source.table}"

    def mapping_key(self, source: SourceTable) -> str | None:
        """The ``tables=`` key that maps the source, if one does."""
        return next((name for name in source.names if name in self.names), None)


# The one event time a Debezium stream takes: the source database's commit time of each change.
SOURCE_TIME = "source.ts_ms"


def debezium(  # Over 60 lines: one keyword argument per option, and what each does, as users call it.
    namespace: str,
    *,
    tables: Mapping[str, str] | None = None,
    partition_by: Mapping[str, Sequence[str]] | None = None,
    table_properties: Mapping[str, str] | None = None,
    evolve_schema: bool = True,
    maintain: bool = False,
    dead_letter: str | None = None,
    event_time: str | None = None,
    lateness: str | datetime.timedelta | None = None,
    branch: str | None = None,
    audit: Sequence[Callable[..., list[str]]] = (),
) -> Debezium:
    """Route Debezium change events to one table each: ``icesink.stream(df, tables=icesink.debezium("inventory"))``.

    ``df`` has the columns Spark's Kafka source gives: ``key`` and ``value`` (string or binary, JSON as
    Kafka Connect's JsonConverter writes it, with or without ``schema``) and optionally ``topic``,
    ``partition``, ``offset``. Each source table goes to ``namespace.<table>``, or where ``tables`` maps
    it (by ``connector.database.schema.table``, ``database.schema.table``, ``schema.table``, ``database.table``
    or ``table``). A table belongs to
    one source table for good: a second source table that would go there stops the stream, naming both.
    ``partition_by`` and ``table_properties`` apply to the tables icesink creates (partition only by key
    columns); ``evolve_schema`` adds the columns the source adds and widens the ones it widens; ``maintain``
    has the inline committer maintain every table between commits, as ``icesink.stream(maintain=True)`` does
    for one.

    A record decoding cannot apply (not JSON or not UTF-8, not a change event, a truncate, no key, a value its
    column cannot hold exactly, Debezium's placeholder for an unchanged TOASTed value) stops the stream,
    naming it; with ``dead_letter="namespace.table"`` it goes to that table instead (created if missing,
    appends: ``topic``, ``partition``, ``offset``, ``key`` and ``value`` as the bytes Kafka held, ``error``),
    committed with the micro-batch's other tables, and the stream goes on without the change it held.

    ``event_time="source.ts_ms"`` keeps the stream's watermark by the time each change was made in the source
    database, per Kafka topic and partition, with ``lateness`` allowed (see docs/completeness.md); every table
    an atomic commit moves records the same ``icesink.watermark``.

    ``branch="audit"`` commits every table's checkpoints to that branch, and ``audit=[...]`` checks each new branch
    snapshot before ``main`` moves to it, every table's ``main`` in one transaction (docs/write-audit-publish.md):
    each check runs on every table (``audit.identifier`` says which), so give checks that fit them all. The
    dead-letter table is written to ``main``, at once.
    """
    names, partitions = _checked(namespace, tables, partition_by, evolve_schema, maintain, dead_letter)
    if table_properties is not None and not isinstance(table_properties, Mapping):
        raise ConfigError(
            "icesink.debezium: table_properties takes a dict of names to values, e.g. "
            f"{{'write.target-file-size-bytes': '134217728'}}, not {table_properties!r}"
        )
    check_user_properties(table_properties, "icesink.debezium")
    _check_event_time(event_time, lateness)
    per_table = TableOptions(
        table_properties=table_properties,
        evolve_schema=evolve_schema,
        maintain=maintain,
        event_time=event_time,
        lateness=lateness,
        branch=branch,
        audit=tuple(audit) if isinstance(audit, list | tuple) else audit,  # a wrong kind is refused by the stream
    )
    refuse_wrong_types(per_table, "icesink.debezium")
    return Debezium(namespace, names, partitions, per_table, dead_letter)


def _check_event_time(event_time: object, lateness: object) -> None:
    if event_time is not None and event_time != SOURCE_TIME:
        raise ConfigError(
            f"icesink.debezium: event_time takes {SOURCE_TIME!r} (when each change was made in the source database), "
            f"not {event_time!r}"
        )
    if lateness is None:
        return
    if event_time is None:
        raise ConfigError(f"icesink.debezium: lateness applies with event_time={SOURCE_TIME!r}")
    try:
        duration_micros(lateness)
    except DurationError as e:
        raise ConfigError(f"icesink.debezium: lateness: {e}") from None


def _checked(
    namespace: str,
    tables: Mapping[str, str] | None,
    partition_by: Mapping[str, Sequence[str]] | None,
    evolve_schema: bool,
    maintain: bool,
    dead_letter: str | None,
) -> tuple[dict[str, str], dict[str, Sequence[str]]]:
    """The options of :func:`debezium` checked; the mappings as dicts."""
    if not isinstance(namespace, str) or not namespace or namespace.startswith(".") or namespace.endswith("."):
        raise ConfigError(
            f"icesink.debezium: namespace must be a namespace name such as 'inventory', not {namespace!r}"
        )
    for option, mapping in (("tables", tables), ("partition_by", partition_by)):
        if mapping is not None and not isinstance(mapping, Mapping):
            raise ConfigError(
                f"icesink.debezium: {option} takes a dict by source table (or table), e.g. "
                + (
                    "{'inventory.public.orders': 'shop.orders'}"
                    if option == "tables"
                    else "{'shop.orders': ['bucket(8, id)']}"
                )
                + f", not {mapping!r}"
            )
    names = dict(tables or {})
    for source, target in names.items():
        if not _is_table_name(target):
            raise ConfigError(
                f"icesink.debezium: tables maps source table {source!r} to {target!r}; map it to a table name "
                "'namespace.table' (its options come from partition_by and table_properties)"
            )
    if dead_letter is not None and not _is_table_name(dead_letter):
        raise ConfigError(
            f"icesink.debezium: dead_letter must be a table name 'namespace.table' (or None), not {dead_letter!r}"
        )
    if dead_letter is not None and dead_letter in names.values():
        source = next(s for s, t in names.items() if t == dead_letter)
        raise ConfigError(
            f"icesink.debezium: {dead_letter!r} is both the dead_letter table and where source table {source!r} goes"
        )
    partitions = dict(partition_by or {})
    for target, fields in partitions.items():
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise ConfigError(
                f"icesink.debezium: partition_by[{target!r}] must be a list of partition fields such as "
                f"['bucket(8, id)'], not {fields!r}"
            )
    for option, value in (("evolve_schema", evolve_schema), ("maintain", maintain)):
        if not isinstance(value, bool):
            raise ConfigError(f"icesink.debezium: option {option} must be True or False, not {value!r}")
    return names, partitions


def _is_table_name(name: object) -> bool:
    """``namespace.table``, no part empty (as the catalog requires)."""
    return isinstance(name, str) and len(parts := name.split(".")) >= 2 and all(parts)
