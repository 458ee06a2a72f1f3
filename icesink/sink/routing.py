"""A micro-batch split by table: which tables it goes to, with their settings and rows.

A stream's router gives each micro-batch its targets; the tables named when the stream started take what
their ``select`` gives (:class:`StaticRouter`), a Debezium stream finds its tables in the records
(:mod:`icesink.sink.debezium_router`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from icesink.errors import TableNotFoundError

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from icesink.errors import SchemaMismatchError
    from icesink.results import WriteResult
    from icesink.sink.phases import Phases
    from icesink.sink.sink_settings import SinkSettings
    from icesink.sink.table_sink import PreparedWrite


@dataclass(frozen=True)
class TargetSettings:
    """One table of a stream and the part of each micro-batch that goes there (None: all of it)."""

    settings: SinkSettings
    select: Callable[[DataFrame], DataFrame] | None = None


@dataclass(frozen=True)
class RoutedTarget:
    """One table of a micro-batch: its settings, the schema of its rows, and the rows (None: the router writes
    them itself, see :attr:`Routed.write_all`). An ``optional`` table is staged only if it was written files."""

    settings: SinkSettings
    schema: StructType
    rows: DataFrame | None = None
    optional: bool = False
    # The router's account of a column that does not fit the table (which records hold which type), in place
    # of the one a DataFrame's author gets.
    explain: Callable[[SchemaMismatchError, int | None], SchemaMismatchError] | None = None


# The router's own write of every table of a micro-batch (one Spark job): each table's results, in order.
WriteAll = Callable[[Sequence["PreparedWrite"], "Phases"], list[list["WriteResult"]]]


@dataclass
class Routed:
    """A micro-batch split by table; ``release`` frees what routing cached (or files written and not taken);
    ``write_all`` (if any) writes every table's rows at once, where each table's ``rows`` would otherwise be a
    Spark job of its own. A router that wrote the files while routing (:mod:`icesink.sink.known_routes`) gives
    ``check`` and ``general``: the micro-batch routed again its general way, when ``check`` or ``write_all`` finds a
    table otherwise than predicted."""

    targets: list[RoutedTarget]
    release: Callable[[], object] = lambda: None
    write_all: WriteAll | None = None
    general: Callable[[], Routed] | None = None
    # Asked with the targets' tables as loaded, before they are fitted to the checkpoint (may raise Mispredicted).
    check: Callable[[Sequence[Table]], None] | None = None
    # Told the tables whose schema the stream itself changed after writing them (columns made optional for nulls
    # they got): a router that predicts the next micro-batch's tables predicts them at their new schema.
    refitted: Callable[[Sequence[str]], None] = lambda identifiers: None
    # Asked about a table of the micro-batch that is gone from the catalog (another tool dropped it since the router
    # met it): the micro-batch routed again with the table created anew, as a restarted stream would create it; None
    # (or no ``recreate``) where the router creates no tables, and the table's absence is the error.
    recreate: Callable[[str], Callable[[], Routed] | None] | None = None


class Router(Protocol):
    def route(self, batch_df: DataFrame, job_id: str, checkpoint_id: int) -> Routed: ...


class StaticRouter:
    """The tables named when the stream started, each taking its ``select`` of the micro-batch."""

    def __init__(self, targets: Sequence[TargetSettings], read_twice: bool = False) -> None:
        self._targets = list(targets)
        # The micro-batch is read by a second job (late rows set aside), which must see the rows the first saw.
        self._read_twice = read_twice

    @property
    def only_table(self) -> str | None:
        """The one table of a stream into one table (None for several)."""
        return self._targets[0].settings.table if len(self._targets) == 1 else None

    def route(self, batch_df: DataFrame, job_id: str, checkpoint_id: int) -> Routed:
        if len(self._targets) == 1 and not self._read_twice:
            target = self._targets[0]
            rows = target.select(batch_df) if target.select else batch_df
            return Routed([RoutedTarget(target.settings, rows.schema, rows)])
        cached = batch_df.persist()  # every target reads the micro-batch: its source is read once
        selected = [(t.settings, t.select(cached) if t.select else cached) for t in self._targets]
        return Routed([RoutedTarget(settings, rows.schema, rows) for settings, rows in selected], cached.unpersist)


def recreation(
    routed: Routed, error: TableNotFoundError, recreated: set[str], checkpoint_id: int
) -> Callable[[], Routed]:
    """How to route the micro-batch again with a table of it that is gone from the catalog created anew (each table
    once: ``recreated`` holds those done); raises where the router does not create it."""
    gone = error.table
    if routed.recreate is not None and gone is not None and gone not in recreated:
        again = routed.recreate(gone)
        if again is not None:
            recreated.add(gone)
            return again
    if routed.recreate is None and gone is not None and any(t.settings.table == gone for t in routed.targets):
        raise TableNotFoundError(
            f"table {gone}, checkpoint {checkpoint_id}: the table is gone from the catalog; it was dropped while the "
            "stream wrote it. Nothing of the checkpoint was written. Restart the stream to go on: with "
            "create_table=True it creates the table anew, holding the rows from this checkpoint on; or create or "
            "restore the table first (`icesink tables list` shows what the catalog holds)",
            table=gone,
            checkpoint_id=checkpoint_id,
        ) from error
    raise error
