"""Planning a change read on the driver: snapshots of a range, and per snapshot the files that changed.

Everything planned here is plain data (pyiceberg ``DataFile`` records pickle),
so a task can be shipped to an executor, which reads the files with the
table's own FileIO (a ``StaticTable`` of the end snapshot's metadata file: no
catalog, no database on executors).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from icesink.errors import ConfigError, StartingSnapshotExpiredError
from icesink.iceberg.deletes import GLOBAL, PartitionKey, partition_scope
from icesink.properties import MAINTENANCE_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from icesink.iceberg.scan import LiveFile, ManifestCache, PlannedDelete, PlannedScan


@dataclass(frozen=True)
class Commit:
    """The snapshot a change belongs to."""

    snapshot_id: int
    sequence_number: int
    timestamp_ms: int
    watermark: int | None = None  # the table's watermark as of the snapshot (microseconds), if any is recorded


@dataclass(frozen=True)
class ChangedFile:
    """A data file live before the snapshot whose live rows the snapshot may change.

    ``before`` and ``after`` are the position deletes applying to it before and
    after; ``after`` is None when the snapshot removed the file.
    """

    data: LiveFile
    before: frozenset[DataFile]
    after: frozenset[DataFile] | None


@dataclass(frozen=True)
class NewFile:
    """A data file the snapshot added (or, for a table's first state, a file of that state)."""

    data: LiveFile
    after: frozenset[DataFile]


@dataclass(frozen=True)
class SnapshotChanges:
    """What one snapshot changed in one partition (or in the whole table, for an unpartitioned one)."""

    commit: Commit
    scope: PartitionKey
    changed: tuple[ChangedFile, ...] = ()
    added: tuple[NewFile, ...] = ()
    equality_before: tuple[PlannedDelete, ...] = ()
    equality_after: tuple[PlannedDelete, ...] = ()

    @property
    def files(self) -> int:
        return len(self.changed) + len(self.added)

    @property
    def deletes_rows(self) -> bool:
        """Whether the snapshot deleted rows here: files it removed, or whose rows its position or equality deletes
        reach (a part of a table's state, read from its oldest snapshot kept, deletes none)."""
        return bool(self.changed)

    @property
    def rows(self) -> int:
        """Rows the read of this part touches (an upper bound of the changes it yields)."""
        return sum(self.data_files.values())

    @property
    def data_files(self) -> dict[str, int]:
        """The data files the read of this part touches, with their rows."""
        files = [c.data for c in self.changed] + [a.data for a in self.added]
        return {f.path: int(f.file.record_count) for f in files}


@dataclass
class Planner:
    """Plans changes of one table, remembering the snapshots and manifests it has read."""

    table: Table
    cache: ManifestCache | None = None
    _planned: dict[int, PlannedScan] = field(default_factory=dict)
    _watermarks: dict[int, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from icesink.iceberg.scan import ManifestCache

        if self.cache is None:
            self.cache = ManifestCache()

    def _commit(self, snapshot: Snapshot) -> Commit:
        from icesink.iceberg.watermarks import ever_had_watermark, watermark_at

        metadata = self.table.metadata
        timed = ever_had_watermark(metadata)  # a table that never had one is not walked
        watermark = watermark_at(metadata, snapshot.snapshot_id, self._watermarks) if timed else None
        return Commit(snapshot.snapshot_id, snapshot.sequence_number or 0, snapshot.timestamp_ms, watermark)

    def _files(self, snapshot_id: int) -> PlannedScan:
        from icesink.iceberg.scan import planned_files

        if snapshot_id not in self._planned:
            self._planned[snapshot_id] = planned_files(self.table, snapshot_id, self.cache)
        return self._planned[snapshot_id]

    def snapshots(self, start: int | None, end: int, retention_hint: str = "") -> list[Snapshot]:
        """The snapshots after ``start`` (None: from the oldest one kept) up to ``end``, oldest first."""
        metadata = self.table.metadata
        found: list[Snapshot] = []
        snapshot = metadata.snapshot_by_id(end)
        while snapshot is not None and snapshot.snapshot_id != start:
            found.append(snapshot)
            parent = snapshot.parent_snapshot_id
            snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
        if start is not None and (snapshot is None or snapshot.snapshot_id != start):
            identifier = ".".join(self.table.name())
            if self._is_ancestor(end, start):
                raise ConfigError(
                    f"table {identifier}: the range is backwards: snapshot {start}, where the read starts, comes "
                    f"after snapshot {end}, where it ends; swap them"
                )
            raise StartingSnapshotExpiredError(
                f"table {identifier}: snapshot {start}, where this read starts, is no longer in the history of "
                f"main (expired by history.expire.max-snapshot-age-ms / min-snapshots-to-keep, or rolled back); "
                f"the changes since it cannot be told{retention_hint}. Start again from a snapshot the table "
                "keeps (starting=earliest reads its oldest state), and keep snapshots longer than the reader lags"
            )
        return list(reversed(found))

    def _is_ancestor(self, ancestor: int, of: int) -> bool:
        """Whether snapshot ``ancestor`` is in the history of snapshot ``of``."""
        metadata = self.table.metadata
        snapshot = metadata.snapshot_by_id(of)
        while snapshot is not None:
            if snapshot.snapshot_id == ancestor:
                return True
            parent = snapshot.parent_snapshot_id
            snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
        return False

    def changes(self, snapshot: Snapshot) -> list[SnapshotChanges]:
        """What ``snapshot`` changed, per partition scope; nothing for maintenance and other rewrites."""
        summary = snapshot.summary
        if summary is not None and (summary.operation.value == "replace" or summary[MAINTENANCE_PROPERTY] is not None):
            return []
        commit = self._commit(snapshot)
        after = self._files(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        if parent is None:
            return self._state(commit, after)
        if self.table.metadata.snapshot_by_id(parent) is None:
            raise StartingSnapshotExpiredError(
                f"table {'.'.join(self.table.name())}: the parent of snapshot {snapshot.snapshot_id} has expired"
            )
        before = self._files(parent)
        return self._delta(commit, before, after)

    def state(self, snapshot: Snapshot) -> list[SnapshotChanges]:
        """The table's rows at ``snapshot``, as inserts: where a read from the oldest snapshot kept starts.

        For the table's first snapshot that is what it changed. Once older history expired, it is what every
        snapshot before left, whatever this one did: a compaction changes no row, yet holds them all. Its parent
        id cannot tell the two apart, since pyiceberg clears the parent id of a snapshot whose parent it expires.
        """
        commit = self._commit(snapshot)
        return self._state(commit, self._files(snapshot.snapshot_id))

    def _state(self, commit: Commit, files: PlannedScan) -> list[SnapshotChanges]:
        from icesink.iceberg.scan import LiveFile

        by_scope: dict[PartitionKey, list[NewFile]] = defaultdict(list)
        for planned in files.data:
            live = LiveFile(planned.file, planned.sequence_number)
            by_scope[partition_scope(self.table, planned.file)].append(NewFile(live, planned.position_deletes))
        return [
            SnapshotChanges(commit, scope, added=tuple(added), equality_after=self._equality(files, scope))
            for scope, added in by_scope.items()
        ]

    def _delta(self, commit: Commit, before: PlannedScan, after: PlannedScan) -> list[SnapshotChanges]:
        from icesink.iceberg.scan import LiveFile

        old = {str(p.file.file_path): p for p in before.data}
        new = {str(p.file.file_path): p for p in after.data}
        known = {str(e.file.file_path) for e in before.equality_deletes}
        fresh_equality = [e for e in after.equality_deletes if str(e.file.file_path) not in known]
        changed: dict[PartitionKey, list[ChangedFile]] = defaultdict(list)
        for path, planned in old.items():
            scope = partition_scope(self.table, planned.file)
            now = new.get(path)
            reached = any(
                e.sequence_number > planned.sequence_number and partition_scope(self.table, e.file) in (GLOBAL, scope)
                for e in fresh_equality
            )
            if now is None or reached or now.position_deletes - planned.position_deletes:
                live = LiveFile(planned.file, planned.sequence_number)
                after_deletes = None if now is None else now.position_deletes
                changed[scope].append(ChangedFile(live, planned.position_deletes, after_deletes))
        added: dict[PartitionKey, list[NewFile]] = defaultdict(list)
        for path, planned in new.items():
            if path not in old:
                live = LiveFile(planned.file, planned.sequence_number)
                added[partition_scope(self.table, planned.file)].append(NewFile(live, planned.position_deletes))
        return [
            SnapshotChanges(
                commit,
                scope,
                changed=tuple(changed.get(scope, ())),
                added=tuple(added.get(scope, ())),
                equality_before=self._equality(before, scope),
                equality_after=self._equality(after, scope),
            )
            for scope in sorted(set(changed) | set(added), key=repr)
        ]

    def _equality(self, files: PlannedScan, scope: PartitionKey) -> tuple[PlannedDelete, ...]:
        """The equality deletes that can reach a partition: its own and the unpartitioned ones."""
        return tuple(e for e in files.equality_deletes if partition_scope(self.table, e.file) in (GLOBAL, scope))


def by_snapshot(parts: Sequence[SnapshotChanges]) -> Iterator[list[SnapshotChanges]]:
    """The parts in runs of one snapshot each (the planner gives a snapshot's partitions one after another)."""
    run: list[SnapshotChanges] = []
    for part in parts:
        if run and part.commit.snapshot_id != run[0].commit.snapshot_id:
            yield run
            run = []
        run.append(part)
    if run:
        yield run
