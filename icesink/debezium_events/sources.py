"""The table of the source database a Debezium change comes from, as its ``source`` block names it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from icesink.debezium_events.envelope import DecodeError


@dataclass(frozen=True)
class SourceTable:
    """The table of the source database a change comes from, as Debezium's ``source`` block names it.

    ``connector`` is the connector's logical name (``topic.prefix``), ``database`` the database, ``schema`` the
    schema (None where the database has none, as MySQL's); ``table`` is the table's own name, dots and all.
    """

    connector: str | None
    database: str | None
    schema: str | None
    table: str

    def __str__(self) -> str:
        """``schema.table`` (PostgreSQL) or ``database.table`` (MySQL), as the source names it."""
        container = self.schema or self.database
        return f"{container}.{self.table}" if container else self.table

    @property
    def names(self) -> tuple[str, ...]:
        """The names a mapping may give it by, most specific first: ``connector.database.schema.table`` (with
        the connector's logical name, ``topic.prefix``: two connectors may capture databases of one name),
        ``database.schema.table``, ``schema.table`` (or ``database.table``), ``table``."""
        full = ".".join(p for p in (self.database, self.schema, self.table) if p)
        connected = f"{self.connector}.{full}" if self.connector else None
        database = f"{self.database}.{self.schema}.{self.table}" if self.database and self.schema else None
        return tuple(dict.fromkeys(n for n in (connected, database, str(self), self.table) if n))

    @cached_property
    def key(self) -> str:
        """One string per source table (what a micro-batch is grouped by)."""
        return json.dumps([self.connector, self.database, self.schema, self.table], ensure_ascii=False)

    @classmethod
    def of_key(cls, key: str) -> SourceTable:
        connector, database, schema, table = json.loads(key)
        return cls(connector, database, schema, table)

    def recorded(self) -> str:
        """As a table records the source it belongs to (the table property icesink.debezium.source)."""
        parts = {"connector": self.connector, "database": self.database, "schema": self.schema, "table": self.table}
        return json.dumps(parts, sort_keys=True, ensure_ascii=False)

    @classmethod
    def of_recorded(cls, text: str) -> SourceTable | None:
        """The source a table records, or None when the record is not one icesink wrote."""
        try:
            parts = json.loads(text)
            return cls(parts["connector"], parts["database"], parts["schema"], str(parts["table"]))
        except (ValueError, TypeError, KeyError):
            return None

    def describe(self) -> str:
        """Every part of the name, for messages about two sources that share a shorter one."""
        parts = [f"connector {self.connector}"] if self.connector else []
        parts += [f"database {self.database}"] if self.database else []
        parts += [f"schema {self.schema}"] if self.schema else []
        return f"{self} ({', '.join([*parts, f'table {self.table}'])})"


def source_table(envelope: dict[str, Any], topic: str | None) -> SourceTable:
    """The source block's names; from the topic (``prefix.schema.table``) when the source says nothing."""
    source = envelope.get("source")
    source = source if isinstance(source, dict) else {}
    table = source.get("table")
    if table:
        return SourceTable(_name(source.get("name")), _name(source.get("db")), _name(source.get("schema")), str(table))
    if topic:
        parts = topic.split(".")
        return SourceTable(parts[0] if len(parts) > 2 else None, None, parts[-2] if len(parts) > 1 else None, parts[-1])
    raise DecodeError("an event whose source names no table, outside any topic")


def _name(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
