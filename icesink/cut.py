"""Several tables read at one consistent cut: the catalog's state at one instant, or one checkpoint of a job.

A front door beside :mod:`icesink.reader` (which it reads through): it also asks the ledger whether a
checkpoint is still staged somewhere, which the read side itself never needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.arrays import empty_table
from icesink.catalog.config import CatalogConfig, resolve_catalog
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog, table_at
from icesink.catalog.pointers import read_pointers
from icesink.changelog.api import changes
from icesink.changelog.compute import empty_changelog
from icesink.errors import CheckpointNotCommittedError, ConfigError, SnapshotNotFoundError
from icesink.iceberg.marker import CheckpointExpired, committed_marker, snapshot_at_checkpoint
from icesink.reader import read_table
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table


def read_tables(
    tables: Sequence[str],
    job_id: str | None = None,
    checkpoint_id: int | None = None,
    catalog: str | CatalogConfig | dict[str, str] | None = None,
) -> dict[str, pa.Table]:
    """Several tables at one consistent cut, so that a join of them never sees a torn state.

    Without ``checkpoint_id``: every table as the catalog held it at one instant (their pointers read
    in one transaction); tables a stream commits atomically (``icesink.stream(tables=...)``) come back
    at the same checkpoint of its job. With ``job_id`` and ``checkpoint_id``: every table right after
    that checkpoint of the job (later snapshots of other writers that hold no later checkpoint of the
    job included); a table where a checkpoint up to it is still staged, or whose snapshots of it were
    expired, is an error naming it.

    Returns:
        ``{table: rows}``, deletes applied, in the order given.
    """
    tables = _names(tables)
    if (job_id is None) != (checkpoint_id is None):
        raise ConfigError("read_tables: pass job_id and checkpoint_id together (or neither, for the catalog's now)")
    if checkpoint_id is not None and (not isinstance(checkpoint_id, int) or isinstance(checkpoint_id, bool)):
        raise ConfigError(f"read_tables: checkpoint_id is a checkpoint number (an int), not {checkpoint_id!r}")
    config = resolve_catalog(catalog)
    handle = open_catalog(config)
    if job_id is None or checkpoint_id is None:
        pointers = read_pointers(config, tables, pending=True)
        now = {name: table_at(handle, name, location) for name, location in pointers.items()}
        return {name: read_table(table) for name, table in now.items()}
    committed = _committed_tables(config, handle, tables, job_id, checkpoint_id)
    return {name: _read_at(table, ref, job_id, checkpoint_id) for name, (table, ref) in committed.items()}


def changes_of_tables(
    tables: Sequence[str],
    job_id: str,
    to_checkpoint: int,
    from_checkpoint: int | None = None,
    mode: str = "changelog",
    *,
    net_changes: bool = False,
    catalog: str | CatalogConfig | dict[str, str] | None = None,
) -> dict[str, pa.Table]:
    """The changes several tables got between two checkpoints of one job: after ``from_checkpoint`` (None:
    from the start) up to and including ``to_checkpoint``, each table's as :func:`icesink.changes` gives
    them. The same cut in every table: a downstream join of the changes never sees half a checkpoint.

    Returns:
        ``{table: changes}``, in the order given.
    """

    tables = _names(tables)
    for name, value in (("to_checkpoint", to_checkpoint), ("from_checkpoint", from_checkpoint)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"changes_of_tables: {name} is a checkpoint number (an int), not {value!r}")
    if from_checkpoint is not None and from_checkpoint > to_checkpoint:
        raise ConfigError(
            f"changes_of_tables: from_checkpoint {from_checkpoint} is after to_checkpoint {to_checkpoint}"
        )
    config = resolve_catalog(catalog)
    handle = open_catalog(config)
    loaded = _committed_tables(config, handle, tables, job_id, to_checkpoint)
    found = {}
    for name, (table, ref) in loaded.items():
        end = _at_checkpoint(table, ref, job_id, to_checkpoint)
        start = _at_checkpoint(table, ref, job_id, from_checkpoint) if from_checkpoint is not None else None
        if end is None:  # the table had no snapshot yet at the end of the range
            found[name] = _no_changes(table, mode)
            continue
        found[name] = changes(table, start, end, mode, net_changes=net_changes)
    return found


def _committed_tables(
    config: CatalogConfig, handle: SqlCatalog, tables: list[str], job_id: str, checkpoint_id: int
) -> dict[str, tuple[Table, TableRef]]:
    """The tables, once the ledger says the checkpoint is committed in each, with the branch the job commits
    to in each: the pointers are read after that check, so they cannot predate the commit (a commit updates
    the catalog before, or with, the ledger)."""
    ledger = Ledger(config)
    refs = {name: TableRef(name, ledger.branch_at(name, job_id, checkpoint_id)) for name in tables}
    pointers = read_pointers(config, tables, pending=True)
    _check_committed(
        config,
        {name: (table_at(handle, name, location), refs[name]) for name, location in pointers.items()},
        job_id,
        checkpoint_id,
    )
    pointers = read_pointers(config, tables, pending=True)
    return {name: (table_at(handle, name, location), refs[name]) for name, location in pointers.items()}


def _no_changes(table: Table, mode: str) -> pa.Table:
    return empty_changelog(table.schema()) if mode == "changelog" else empty_table(table.schema().as_arrow())


def _names(tables: Sequence[str]) -> list[str]:
    if isinstance(tables, str):
        raise ConfigError(f"a list of tables is needed, not the string {tables!r}; name one table as [{tables!r}]")
    names = list(tables)
    if not names:
        raise ConfigError("name at least one table")
    return names


def _read_at(table: Table, ref: TableRef, job_id: str, checkpoint_id: int) -> pa.Table:
    snapshot_id = _at_checkpoint(table, ref, job_id, checkpoint_id)
    if snapshot_id is None:  # before the table's first snapshot
        return empty_table(table.schema().as_arrow())
    return read_table(table, snapshot_id)


def _at_checkpoint(table: Table, ref: TableRef, job_id: str, checkpoint_id: int) -> int | None:
    try:
        return snapshot_at_checkpoint(table.metadata, job_id, checkpoint_id, ref.branch)
    except CheckpointExpired as e:
        raise SnapshotNotFoundError(
            f"table {ref}: the snapshots holding checkpoint {checkpoint_id} of job {job_id} were expired "
            f"(history ends at snapshot {e.args[0]}); read a later checkpoint, or the tables as they are now"
        ) from e


def _check_committed(
    config: CatalogConfig, tables: dict[str, tuple[Table, TableRef]], job_id: str, checkpoint_id: int
) -> None:
    """The job must have reached the checkpoint, and committed it everywhere: a cut that a later commit could
    still change, or that a staged checkpoint leaves torn, is refused naming why."""

    ledger = Ledger(config)
    markers = [
        m.checkpoint_id
        for table, ref in tables.values()
        if (m := committed_marker(table.metadata, job_id, ref.branch)) is not None
    ]
    last = ledger.last_checkpoint(job_id)  # staged, committed or discarded: the job got that far
    if last is None and not markers:
        raise ConfigError(
            f"job {job_id} has written none of the tables {', '.join(tables)}; `icesink jobs list` shows the jobs"
        )
    for identifier in tables:
        waiting = [r.checkpoint_id for r in ledger.pending(identifier, job_id) if r.checkpoint_id <= checkpoint_id]
        if waiting:
            raise CheckpointNotCommittedError(
                f"table {identifier}: checkpoint {waiting[0]} of job {job_id} is staged but not committed yet, so "
                f"the table is not at checkpoint {checkpoint_id}; commit it (`icesink committer run --once`) or "
                "read an earlier checkpoint"
            )
    last_staged = max([*markers, last if last is not None else -1])
    if checkpoint_id > last_staged:
        raise CheckpointNotCommittedError(
            f"job {job_id} has not reached checkpoint {checkpoint_id} (its last is {last_staged}): a later commit "
            "could still change the tables at that checkpoint. Read a checkpoint the job has committed"
        )
