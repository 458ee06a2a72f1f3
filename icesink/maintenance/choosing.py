"""Which data files a compaction rewrites: the choice that makes a pass cost what changed, not what the table holds.

Two rules, as Iceberg's ``rewrite_data_files`` has them and beyond:

* A file is rewritten for its deletes only once they remove a real share of its rows
  (``icesink.maintain.delete-ratio-threshold``) or pile up (``icesink.maintain.delete-file-threshold``). Below
  that, its position deletes are merged into one delete file of its own
  (:mod:`icesink.maintenance.merge_deletes`), which reads the deletes and never the rows: a 20 GB file with a
  thousand deleted rows costs a thousand positions, not 20 GB.
* Small files are compacted by size tier, as an LSM tree's size-tiered compaction does: files within a factor of
  ``TIER_FACTOR`` of one another wait until a partition has ``icesink.maintain.min-input-files`` of them, and the
  smaller ones go with them. A row is rewritten about log4(target size / first size) times on its way to a
  full-size file, and a large file is never rewritten to take in a few small ones (which made every pass of a
  long stream rewrite the whole table).

How many rows a delete file removes from which data file is counted exactly: a delete file naming one data file
says it in its record count, one naming several is read (its ``file_path`` column: the deletes, not the data).
pyiceberg's delete index goes by ``file_path`` bounds, which admit every file between the first and last name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icesink.iceberg.read_caches import Kept
from icesink.iceberg.scan import position_deletes_read
from icesink.reading_threads import in_parallel
from icesink.writer.position_deletes import FILE_PATH_ID

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile

    from icesink.iceberg.scan import PlannedDataFile
    from icesink.maintenance.policy import MaintenancePolicy

TIER_FACTOR = 4
# Tiers below the small-file size; files smaller than its 1/4**TIERS are all one tier (rewriting a few of them
# together costs little whatever their sizes): for a 512 MiB target, below 1.5 MiB.
TIERS = 4


def size_tier(size: int, small_bytes: float) -> int:
    """From 0 (below ``small_bytes / TIER_FACTOR**TIERS``) to ``TIERS`` (within a factor of 4 of ``small_bytes``)."""
    tier, bound = 0, small_bytes / TIER_FACTOR**TIERS
    while size >= bound and tier < TIERS:
        tier, bound = tier + 1, bound * TIER_FACTOR
    return tier


def named_by(delete: DataFile) -> str | None:
    """The one data file a position delete file names, when its ``file_path`` bounds say so; None: several."""
    lower = (delete.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete.upper_bounds or {}).get(FILE_PATH_ID)
    return lower.decode("utf-8") if lower is not None and lower == upper else None


@dataclass(frozen=True)
class PositionDeleteCounts:
    """Per data file location: the position delete files naming it, with how many positions each names."""

    by_data_file: dict[str, dict[str, int]]
    files: dict[str, DataFile] = field(default_factory=dict)  # the delete files, by location

    def deleted(self, data_path: str) -> int:
        """At least the rows deleted from the file: a row deleted again (each commit's conversion names the rows of
        an updated key again) counts once per delete file naming it."""
        return sum(self.by_data_file.get(data_path, {}).values())

    def distinct_deleted(self, io: FileIO, data_path: str) -> int:
        """The rows deleted from the file, each once: the delete files naming it are read."""
        naming = [self.files[p] for p in self.by_data_file.get(data_path, {})]
        found = position_deletes_read(io, naming)
        arrays = [by_path[data_path] for by_path in found.values() if data_path in by_path]
        return len(pc.unique(pa.concat_arrays(arrays))) if arrays else 0

    def files_naming(self, data_path: str) -> int:
        return len(self.by_data_file.get(data_path, {}))


# What delete files naming several data files name, kept per process: a maintenance pass counts them when it plans
# compaction and again when it plans merging what is left, and delete files never change. A file is named by its
# location, size and row count (icesink and other engines write each under a new name).
SHARED_COUNTS: Kept[dict[str, int]] = Kept(200_000, lambda counts: len(counts) + 1)


def count_position_deletes(io: FileIO, deletes: Iterable[DataFile]) -> PositionDeleteCounts:
    """How many positions each position delete file names in each data file (files naming several are read once
    per process)."""

    unique = {str(d.file_path): d for d in deletes}
    by_data_file: dict[str, dict[str, int]] = {}
    shared = []
    for path, delete in unique.items():
        one = named_by(delete)
        if one is None:
            shared.append(delete)
        else:
            by_data_file.setdefault(one, {})[path] = delete.record_count

    def read(delete: DataFile) -> dict[str, int]:
        name = (str(delete.file_path), int(delete.file_size_in_bytes), int(delete.record_count))
        kept = SHARED_COUNTS.get(name)
        if kept is not None:
            return kept
        with io.new_input(str(delete.file_path)).open() as stream:
            column = pq.ParquetFile(stream).read(columns=["file_path"]).column("file_path")
        counts = column.value_counts()
        found = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
        SHARED_COUNTS.put(name, found)
        return found

    for delete, counts in zip(shared, in_parallel(read, shared), strict=True):
        for data_path, count in counts.items():
            by_data_file.setdefault(data_path, {})[str(delete.file_path)] = count
    return PositionDeleteCounts(by_data_file, unique)


@dataclass(frozen=True)
class Candidate:
    """A data file compaction may rewrite, and why."""

    data: PlannedDataFile
    for_deletes: bool  # its deletes ask for a rewrite, whatever its size
    tier: int | None  # a small file's size tier; None: a full-size file


def _over_share(data: PlannedDataFile, counts: PositionDeleteCounts, io: FileIO, policy: MaintenancePolicy) -> bool:
    """Whether the file's deletes remove ``delete_ratio_threshold`` of its rows: the bound from the delete files'
    counts first, the delete files read only when it says so."""
    path, rows = str(data.file.file_path), data.file.record_count
    bound = counts.deleted(path)
    if bound == 0 or (rows and bound < policy.delete_ratio_threshold * rows):
        return False
    return not rows or counts.distinct_deleted(io, path) >= policy.delete_ratio_threshold * rows


def candidate(
    data: PlannedDataFile,
    counts: PositionDeleteCounts,
    io: FileIO,
    equality_deletes: int,
    policy: MaintenancePolicy,
    small_bytes: float,
    everything: bool,
) -> Candidate | None:
    """Whether and why ``data`` is a candidate; ``equality_deletes`` is how many equality delete files reach it."""

    path = str(data.file.file_path)
    delete_files = counts.files_naming(path) + equality_deletes
    if everything:
        for_deletes = delete_files > 0
    else:
        for_deletes = delete_files >= policy.delete_file_threshold or _over_share(data, counts, io, policy)
    size = data.file.file_size_in_bytes
    tier = size_tier(size, small_bytes) if size < small_bytes else None
    if not for_deletes and tier is None:
        return None
    return Candidate(data, for_deletes, tier)


def chosen(candidates: list[Candidate], min_input_files: int, everything: bool) -> list[PlannedDataFile]:
    """The candidates of one partition to rewrite now.

    With ``everything``: all of them, once there are two or one has deletes. Otherwise the highest tier with
    ``min_input_files`` small files, or of a file rewritten for its deletes, decides: every file of that tier and
    below goes, and every file rewritten for its deletes.
    """

    if everything:
        enough = len(candidates) >= 2 or any(c.for_deletes for c in candidates)
        return [c.data for c in candidates] if enough else []
    tiers = Counter(c.tier for c in candidates if c.tier is not None)
    full = [tier for tier, count in tiers.items() if count >= min_input_files]
    # A full-size file rewritten for its deletes takes every small file with it.
    for_deletes = [c.tier if c.tier is not None else max(tiers, default=0) for c in candidates if c.for_deletes]
    if not full and not for_deletes:
        return []
    top = max(full + for_deletes)
    return [c.data for c in candidates if c.for_deletes or (c.tier is not None and c.tier <= top)]
