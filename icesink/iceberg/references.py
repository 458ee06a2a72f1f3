"""What a table references, and what its location holds (for ``icesink committer gc``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.table import Table

from icesink.errors import UnsupportedTableError
from icesink.iceberg.manifest_lists import manifests_of


def referenced_paths(table: Table) -> set[str]:
    """Every file any snapshot, metadata log entry or statistics entry of the table points at."""
    metadata = table.metadata
    found = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    found.update(s.statistics_path for s in metadata.statistics)
    found.update(s.statistics_path for s in metadata.partition_statistics)
    seen_manifests: set[str] = set()
    for snapshot in metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in manifests_of(table.io, snapshot):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            found.add(manifest.manifest_path)
            # Deleted entries too: an older snapshot may still read the file they name.
            found.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False))
    return found


@dataclass(frozen=True)
class StoredFile:
    """A file found under a table's location."""

    uri: str
    modified_ms: int


def list_files(table: Table, location: str) -> list[StoredFile]:
    """Every file under ``location``, with the table's own file system (local, S3, ...)."""
    from pyarrow.fs import FileSelector, FileType
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if not isinstance(table.io, PyArrowFileIO):
        raise UnsupportedTableError(
            f"table {'.'.join(table.name())}: listing its files needs pyiceberg's PyArrowFileIO, but the catalog "
            f"gives it {type(table.io).__name__}; set the catalog property py-io-impl to "
            "pyiceberg.io.pyarrow.PyArrowFileIO"
        )
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    filesystem = table.io.fs_by_scheme(scheme, netloc)
    infos = filesystem.get_file_info(FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
    prefix = "file://" if scheme == "file" else f"{scheme}://"
    return [
        StoredFile(uri=f"{prefix}{info.path}", modified_ms=int(info.mtime_ns // 1_000_000) if info.mtime_ns else 0)
        for info in infos
        if info.type == FileType.File
    ]


def delete_quietly(io: FileIO, locations: Iterable[str]) -> None:
    """Delete files nothing references (never-committed output); one already gone is fine."""
    for location in locations:
        with contextlib.suppress(FileNotFoundError):
            io.delete(location)
