"""A second table committed with the history's table in one catalog transaction (``atomic=True``).

Each checkpoint also writes one row into the companion table: the checkpoint id and how many changes the
history's table got. The two commit together or not at all, so after every step (and while a killed
committer's work is half done) the catalog's pointers, read in one transaction, must show both tables at
the same checkpoint of the job, apart from checkpoints whose part in the history's table was discarded or
changed nothing there.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from icesink.catalog.config import CatalogConfig

COMPANION = "hist.lines ü %/y"
# Where a committer of a group dies: before any pointer moved, with one pointer moved in the open
# transaction, after the transaction, and while removing the committed checkpoints' delta manifests.
GROUP_FAILPOINTS = (
    "group.before-transaction",
    "group.during-transaction",
    "group.after-transaction",
    "committer.during-cleanup",
)


class Companion:
    """The companion table and what it must hold."""

    def __init__(self, catalog: Any, config: CatalogConfig) -> None:
        from pyiceberg.partitioning import PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField

        from icesink.sink.tables import new_table_location

        schema = Schema(
            NestedField(1, "checkpoint", LongType(), required=True), NestedField(2, "rows", LongType(), required=True)
        )
        # Created as a stream into several tables creates one: readers see it with its first commit.
        namespace, name = COMPANION.rsplit(".", 1)
        location = new_table_location(catalog, config, namespace, name)
        catalog.create_pending_table(COMPANION, schema, PartitionSpec(), location, {})
        self.expected: dict[int, int] = {}  # checkpoint -> changes the history's table got in it
        self.discarded: set[int] = set()  # checkpoints whose part in the history's table an operator discarded
        self.last_marker = -1

    def results(self, table: Any, job: str, checkpoint: int, changes: int, attempt: int) -> Any:
        """The companion's part of a checkpoint, written as a task would."""
        from icesink.committer.staging import TableResults
        from icesink.iceberg.describe import writer_spec
        from icesink.writer.task import TaskWriter

        spec = writer_spec(table, COMPANION, job, None).for_checkpoint(checkpoint)
        writer = TaskWriter(spec, task_id=0, attempt=attempt)
        writer.write(pa.table({"checkpoint": pa.array([checkpoint], pa.int64()), "rows": pa.array([changes])}))
        return TableResults(table, COMPANION, [writer.complete()])

    def check(self, config: CatalogConfig, main: str, job: str) -> None:
        """Its rows, and the cut the catalog's pointers show now."""
        import icesink
        from icesink.errors import TableNotFoundError
        from tests.histories.world import Mismatch

        try:
            read = icesink.read(COMPANION, catalog=config).to_pylist()
        except TableNotFoundError:  # pending: no checkpoint of it committed yet
            read = []
        rows = sorted((r["checkpoint"], r["rows"]) for r in read)
        if rows != sorted(self.expected.items()):
            raise Mismatch(f"the companion table holds checkpoints {rows}, the model {sorted(self.expected.items())}")
        self.check_cut(config, main, job)

    def check_cut(self, config: CatalogConfig, main: str, job: str) -> None:
        """Both pointers read in one transaction: the companion, which moves with every checkpoint, may be
        ahead of the history's table only by checkpoints whose part there was discarded or changed nothing
        (deletes of keys it never held: no snapshot); never behind it."""
        from icesink.catalog.checkpoints import CheckpointState
        from icesink.catalog.ledger import Ledger
        from icesink.catalog.loader import open_catalog, table_at
        from icesink.iceberg.marker import committed_marker
        from tests.helpers.support import pointers
        from tests.histories.world import Mismatch

        catalog = open_catalog(config)
        markers = {main: -1, COMPANION: -1}  # a table not in the catalog yet (pending) is at no checkpoint
        for identifier, location in pointers(config).items():
            if identifier in markers:
                marker = committed_marker(table_at(catalog, identifier, location).metadata, job)
                markers[identifier] = marker.checkpoint_id if marker else -1
        # Read after the pointers: nothing commits meanwhile (the committer is dead or done).
        empty = {
            r.checkpoint_id
            for r in Ledger(config).for_table(main)
            if r.job_id == job and r.state == CheckpointState.COMMITTED and r.snapshot_id is None
        }
        behind = range(markers[main] + 1, markers[COMPANION] + 1)
        torn = [c for c in behind if c not in self.discarded | empty]
        if markers[main] > markers[COMPANION] or torn:
            raise Mismatch(f"a torn cut: one transaction's pointers show the tables at {markers}")
