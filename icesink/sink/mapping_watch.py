"""Which keys of a Debezium stream's ``tables=`` and ``partition_by`` options match something.

A key that matches nothing routes a source table to a default-named, unpartitioned table without a word. The
stream records its keys and what they matched for ``icesink tables mappings``, and says on the driver's log,
once per key, when an unmatched key looks like a name it has seen (``public.customer`` beside source table
``public.customers``, ``sales.orders`` beside ``public.orders``): a key whose source has not sent anything yet
is not a mistake, one that nearly matches is likely one.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Sequence

from icesink.catalog.config import CatalogConfig
from icesink.catalog.mappings import PARTITION_BY_OPTION, TABLES_OPTION, Mappings
from icesink.debezium_events.route import RoutedTable
from icesink.debezium_events.stream_spec import Debezium

log = logging.getLogger("icesink.debezium_events.route")


class MappingWatch:
    """One stream's mapping keys, and which of them matched so far."""

    def __init__(self, spec: Debezium, config: CatalogConfig) -> None:
        self._spec = spec
        self._store = Mappings(config)
        self._keys = [(TABLES_OPTION, name, target) for name, target in spec.names.items()] + [
            (PARTITION_BY_OPTION, name, json.dumps(list(fields))) for name, fields in spec.partition_by.items()
        ]
        self._matched: set[tuple[str, str]] = set()
        self._warned: set[tuple[str, str]] = set()
        self._names: dict[str, set[str]] = {TABLES_OPTION: set(), PARTITION_BY_OPTION: set()}  # seen so far
        self._job_id: str | None = None

    def seen(self, job_id: str, tables: Sequence[RoutedTable]) -> None:
        """A micro-batch routed ``tables``: record what matched for the first time, and say which unmatched keys
        nearly match a name seen so far."""
        if not self._keys:
            return
        if self._job_id != job_id:
            self._job_id = job_id
            self._store.record(job_id, self._keys)
        for option, name, what in self._matches(tables):
            if (option, name) not in self._matched:
                self._matched.add((option, name))
                self._store.matched(job_id, option, name, what)
        for table in tables:
            if table.source is not None:
                self._names[TABLES_OPTION].update(table.source.names)
                self._names[PARTITION_BY_OPTION].add(table.identifier)
        self._warn_near_misses()

    def _matches(self, tables: Sequence[RoutedTable]) -> list[tuple[str, str, str]]:
        found = []
        for table in tables:
            if table.source is None:
                continue
            key = self._spec.mapping_key(table.source)
            if key is not None:
                found.append((TABLES_OPTION, key, str(table.source)))
            if table.identifier in self._spec.partition_by:
                found.append((PARTITION_BY_OPTION, table.identifier, str(table.source)))
        return found

    def _warn_near_misses(self) -> None:
        for option, name, _ in self._keys:
            if (option, name) in self._matched or (option, name) in self._warned:
                continue
            near = _nearest(name, self._names[option])
            if near is None:
                continue
            self._warned.add((option, name))
            if option == TABLES_OPTION:
                log.warning(
                    "icesink.debezium: tables= key %r matches no source table, and source table %r came: is the "
                    "key misspelt? Its rows go to the default table meanwhile (a key is database.schema.table, "
                    "schema.table, database.table or table; icesink tables mappings lists what each key matched)",
                    name,
                    near,
                )
            else:
                log.warning(
                    "icesink.debezium: partition_by key %r names no table the stream writes, and it writes %r: is "
                    "the key misspelt? That table is created unpartitioned (a key is the table's name, as tables= "
                    "maps it or the default namespace.<table>; icesink tables mappings lists what each key matched)",
                    name,
                    near,
                )


def _nearest(name: str, seen: set[str]) -> str | None:
    """A name seen that ``name`` is likely a misspelling of: nearly the same text, or the same last part."""
    close = difflib.get_close_matches(name, sorted(seen), n=1, cutoff=0.85)
    if close:
        return close[0]
    last = name.rsplit(".", 1)[-1]
    return next((n for n in sorted(seen) if n != name and n.rsplit(".", 1)[-1] == last), None)
