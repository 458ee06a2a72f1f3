"""A Debezium micro-batch written in one Spark job when it brings nothing the stream has not met.

The router's general path (:class:`~icesink.sink.debezium_router.DebeziumRouter`) takes two jobs over a cached
decode: a summary of the micro-batch (its source tables, keys and Connect schemas), then the write. Once the stream
has met its sources, most micro-batches bring the routes (source table, key columns, Connect schema) the micro-batch
before brought, so their tables, the schema of their rows and the write prepared for each are known before the
micro-batch is read. Then one job decodes, distributes and writes, as Spark's own job would: no cache, no summary.

What that job cannot take sends the micro-batch the general way, whole, so that its tables get the rows the general
way would give them:

* a record of a route the stream does not know (or one without a schema, which the general way types from its
  values) goes to no table: the task holding it writes nothing and says so;
* a table whose records came by other routes than those its rows' schema was merged from (an old and a new Connect
  schema of a source, where the micro-batch before had both) would be typed by another schema than the general way
  gives it: each task says which routes it wrote for each table, and the driver compares;
* a table the micro-batch before predicted small enough to be written whole by one task, that has more than
  twice that (and more than :data:`MAX_WHOLE_RECORDS`) records in a task, is given back before it fills the task's
  memory: the general way counts it and spreads it over the tasks by key;
* a table changed since it was learned (another tool changed its schema or partition spec, or dropped and created
  it again) is refused before it is fitted to the checkpoint (:meth:`OneJobWrite.check`), so that fitting cannot
  change the table for a schema the general way would not use; a write prepared otherwise than predicted (its
  properties changed, say) is refused after (:meth:`OneJobWrite.take`).

The files written are deleted first (best effort: what cannot be deleted is left to ``icesink committer gc``).
Once a one-job write has failed so, micro-batches go the general way until one brings nothing new (which may be
the one that failed): a stream meeting new tables for a while (a database's first snapshot) pays for one wasted
job, not one a micro-batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from icesink.debezium_events.route import RoutedTable, Summary
from icesink.results import decode_write_result
from icesink.sink.debezium_jobs import route_key
from icesink.writer.files import delete_files
from icesink.writer.json_tables import MISSED, OVERSIZED, JsonTable, Output

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icesink.results import WriteResult
    from icesink.sink.phases import Phases
    from icesink.sink.projection import Projection
    from icesink.sink.table_sink import PreparedWrite
    from icesink.writer.spec import WriterSpec

log = logging.getLogger("icesink.debezium_events.route")


@dataclass(frozen=True)
class KnownTable:
    """A table as the last micro-batch routed to it the general way: its rows' schema, the routes its records came
    by (source, key columns, Connect schema id), and the write prepared for it (spec, projection, JSON names)."""

    table: RoutedTable
    routes: frozenset[str]
    task_table: JsonTable  # with the spec of the checkpoint it was learned at
    projection: Projection
    table_uuid: str

    @property
    def spec(self) -> WriterSpec:
        return self.task_table.spec


class Mispredicted(Exception):
    """A table of the micro-batch is not as the one-job write predicted it: the micro-batch goes the general way
    (not an error a user sees)."""

    def __init__(self, identifier: str, why: str) -> None:
        super().__init__(f"table {identifier}: {why}")
        self.identifier = identifier


class KnownRoutes:
    """What one stream learned of its tables, and whether the next micro-batch may be written in one job."""

    def __init__(self) -> None:
        self._tables: dict[str, KnownTable] = {}
        self._records: dict[str, int] = {}  # each table's records in the last micro-batch (to spread big ones)
        self._one_job = True  # False from a failed one-job write until a micro-batch brings nothing new

    def learned(
        self,
        summary: Summary,
        tables: Sequence[RoutedTable],
        task_tables: Sequence[JsonTable],
        prepared: Sequence[PreparedWrite],
    ) -> None:
        """A micro-batch routed and written the general way: its tables as it routed them; one that brought no
        route (or table schema) not met before lets the next one be tried in one job again."""
        by_source = {s.source.key: s for s in summary.sources}
        new = False
        self._records = dict.fromkeys(self._records, 0)  # a table the micro-batch did not route had no records
        for table, task_table, one in zip(tables, task_tables, prepared, strict=True):
            self._records[table.identifier] = table.records
            if table.source is None:  # the dead-letter table: rejected records reach it whatever their route
                routes: frozenset[str] = frozenset()
            else:
                seen = by_source[table.source.key]
                if seen.without_schema:  # typed from its values on the general path, every time
                    self._tables.pop(table.identifier, None)
                    new = True
                    continue
                routes = frozenset(route_key(table.source.key, k, s) for k in seen.keys for s in seen.schemas)
            before = self._tables.get(table.identifier)
            new = new or before is None or before.routes != routes or before.table.schema != table.schema
            uuid = str(one.table.metadata.table_uuid)
            self._tables[table.identifier] = KnownTable(table, routes, task_table, one.projection, uuid)
        if not new:
            self._one_job = True

    def missed(self) -> None:
        """A one-job write met something new: the next micro-batches go the general way (see the module)."""
        self._one_job = False

    def refitted(self, identifiers: Sequence[str]) -> None:
        """The stream changed these tables' schema after writing them (columns made optional): the write learned
        for them is of the schema before, so the next micro-batch goes the general way, which learns it again,
        rather than be written in one job and refused (see :meth:`OneJobWrite.check`)."""
        if any(i in self._tables for i in identifiers):
            changed = ", ".join(identifiers)
            log.info("icesink.debezium: %s: schema changed; the next micro-batch is routed again", changed)
            self._one_job = False

    def ready(self) -> list[KnownTable] | None:
        """The tables to write the next micro-batch in one job (each with its last count of records), or None:
        the general way."""
        if not self._one_job or not self._tables:
            return None
        return [
            replace(k, table=replace(k.table, records=self._records.get(k.table.identifier, 0)))
            for k in self._tables.values()
        ]

    def counted(self, known: Sequence[KnownTable], records: Sequence[int]) -> None:
        """Each table's records in a micro-batch written in one job (one that decoded to nothing, of heartbeats
        and tombstones, says nothing of the next)."""
        if not any(records):
            return
        for one, count in zip(known, records, strict=True):
            self._records[one.table.identifier] = count


@dataclass
class OneJobWrite:
    """The files one job wrote for a micro-batch, by table, until the handler takes them or lets them go."""

    tables: list[KnownTable]
    results: list[list[WriteResult]]
    specs: list[WriterSpec]  # each table's write as the job did it
    rejected: int = 0  # rows of the dead-letter table
    counts: list[int] = field(default_factory=list)  # records of every known table, written or not
    taken: bool = False

    def check(self, tables: Sequence[Table]) -> None:
        """Before the tables are fitted to the checkpoint: each still the table learned, at the schema and partition
        spec it was learned at (see the module)."""
        for known, spec, table in zip(self.tables, self.specs, tables, strict=False):
            identifier = known.table.identifier
            if str(table.metadata.table_uuid) != known.table_uuid:
                raise Mispredicted(identifier, "the table was created again since the micro-batch before")
            if table.metadata.current_schema_id != spec.schema_id or table.metadata.default_spec_id != spec.spec_id:
                raise Mispredicted(identifier, "its schema or partition spec changed since the micro-batch before")

    def take(self, prepared: Sequence[PreparedWrite], phases: Phases) -> list[list[WriteResult]]:
        """The results, if every table was prepared as predicted (see the module); else :class:`Mispredicted`."""
        for known, spec, one in zip(self.tables, self.specs, prepared[: len(self.tables)], strict=True):
            if one.spec != spec or one.projection != known.projection:
                raise Mispredicted(known.table.identifier, "its write was prepared otherwise than predicted")
        self.taken = True
        phases.done("write")
        return self.results

    def let_go(self) -> None:
        """Delete the files, unless taken (a micro-batch written before, or refused, or sent the general way);
        what cannot be deleted is said and left to gc."""
        if self.taken:
            return
        self.taken = True  # once
        kept = 0
        for spec, results in zip(self.specs, self.results, strict=True):
            for result in results:
                for record in [*result.data_files, *result.delete_files]:
                    try:
                        delete_files([record], spec.storage_options)
                    except Exception as e:  # the error that sent the micro-batch here is the one to raise
                        kept += 1
                        log.debug("table=%s: could not delete %s: %s", spec.table_name, record.path, e)
        if kept:
            log.warning(
                "icesink.debezium: %d file(s) of a one-job write the micro-batch did not keep could not be deleted; "
                "`icesink committer gc` deletes them",
                kept,
            )


def collected(
    outputs: Sequence[Output], known: Sequence[KnownTable], routes: Sequence[str], specs: Sequence[WriterSpec]
) -> OneJobWrite | None:
    """The job's outputs by table (only the tables it wrote); None when a task met a record of a route not known,
    or a table's records came by other routes than its schema was merged from (the files written are deleted then).
    ``routes``: the known routes, by the numbers the tasks report."""
    results: list[list[WriteResult]] = [[] for _ in known]
    records = [0] * len(known)
    seen: list[set[str]] = [set() for _ in known]
    missed = 0
    oversized: KnownTable | None = None
    for number, encoded, _, count, numbers in outputs:
        if number == MISSED:
            missed += count
            continue
        if number == OVERSIZED:  # ``count`` is the table's number
            oversized = known[count]
            continue
        records[number] += count
        seen[number].update(routes[n] for n in numbers)
        if encoded is not None:
            results[number].append(decode_write_result(encoded))
    written = [i for i, r in enumerate(results) if r]
    rejected = sum(r.record_count for i in written if known[i].table.dead_letter for r in results[i])
    write = OneJobWrite(
        [known[i] for i in written], [results[i] for i in written], [specs[i] for i in written], rejected, records
    )
    other = next((k for k, s in zip(known, seen, strict=True) if s and s != k.routes and k.routes), None)
    why = None
    if missed:
        why = f"{missed} record(s) of a route not met before"
    elif oversized is not None:
        why = f"table {oversized.table.identifier} got more records than one task takes of a table"
    elif other is not None:
        why = f"table {other.table.identifier} got records by other routes than the micro-batch before"
    if why is not None:
        log.info("icesink.debezium: %s; the micro-batch is routed again", why)
        write.let_go()
        return None
    return write


def numbered_routes(known: Sequence[KnownTable]) -> tuple[list[str], str, str]:
    """Every known route, and as JSON literals for Spark: each route's number, and each number's table."""
    routes = [route for one in known for route in sorted(one.routes)]
    tables = [number for number, one in enumerate(known) for _ in one.routes]
    return routes, json.dumps({route: n for n, route in enumerate(routes)}), json.dumps(tables)


def task_tables_at(known: Sequence[KnownTable], checkpoint_id: int, whole: Sequence[bool]) -> list[JsonTable]:
    """The tables as the one-job write's tasks write them at ``checkpoint_id``; a table kept ``whole`` in one task
    takes at most :data:`MAX_WHOLE_RECORDS` or twice its predicted share there."""
    return [
        replace(
            k.task_table,
            spec=k.spec.for_checkpoint(checkpoint_id),
            max_records=max(MAX_WHOLE_RECORDS, 2 * k.table.records) if kept else None,
        )
        for k, kept in zip(known, whole, strict=True)
    ]


# The records of a table one task of a one-job write takes whole, whatever the micro-batch before predicted: a
# table kept in one task holds its records in the task's memory.
MAX_WHOLE_RECORDS = 50_000
