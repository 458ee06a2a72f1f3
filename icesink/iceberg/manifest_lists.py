"""Manifest lists, read once per process.

A manifest list never changes once written, and the one a commit writes is the parent the next commit of its
table reads (with the planning of its deletes before that). pyiceberg reads the file again at every call
(it keeps the manifests, not the lists), which cost a committer about a millisecond per table and commit:
parsing the Avro header and resolving its schema. The lists are kept by their location, the one a commit
writes as it writes it, up to a budget of manifests, least recently used first out (a list of more than a
quarter of the budget is read each time).

Lists are written with their Avro schema and record writer made once per process: pyiceberg's writer converts
the list's schema to Avro and builds its record writer at every file, a few tenths of a millisecond that a
commit across many tables paid for every table, every micro-batch. A list's layout depends only on the table's
format version (as manifests' layouts are made once, in :mod:`icesink.iceberg.avro_files`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    MANIFEST_LIST_FILE_SCHEMAS,
    ManifestFile,
    ManifestListWriter,
    ManifestListWriterV1,
    ManifestListWriterV2,
)
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import TableVersion

from icesink.iceberg import check_pyiceberg_version
from icesink.iceberg.avro_files import encoded_output
from icesink.iceberg.read_caches import Kept

check_pyiceberg_version()

# Manifests named by the lists kept, about a kilobyte each where lists do not share them (a committer's lists do:
# consecutive lists of a table name mostly the same manifests).
BUDGET_MANIFESTS = 20_000

# A list counts its manifests and one more, so that lists of no manifest count too.
_LISTS: Kept[tuple[ManifestFile, ...]] = Kept(BUDGET_MANIFESTS, lambda manifests: len(manifests) + 1)


def manifests_of(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    """The snapshot's manifests, as pyiceberg's ``Snapshot.manifests`` reads them."""
    location = snapshot.manifest_list
    known = _LISTS.get(location)
    if known is not None:
        return list(known)
    manifests = tuple(snapshot.manifests(io))
    remember_list(location, manifests)
    return list(manifests)


def remember_list(location: str, manifests: Sequence[ManifestFile]) -> None:
    """The manifests of the list at ``location``, as written there."""
    _LISTS.put(location, tuple(manifests))


def is_kept(location: str) -> bool:
    """Whether the list at ``location`` is read from memory (for tests)."""
    return _LISTS.get(location) is not None


def write_manifest_list(
    format_version: TableVersion,
    output_file: OutputFile,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int | None,
    avro_compression: AvroCompressionCodec,
) -> ManifestListWriter:
    """pyiceberg's ``write_manifest_list``, the same file, with the layout made once."""
    if format_version == 1:
        return _KnownLayoutV1(output_file, snapshot_id, parent_snapshot_id, avro_compression)
    if format_version == 2:
        if sequence_number is None:
            raise ValueError(f"Sequence-number is required for V2 tables: {sequence_number}")
        return _KnownLayoutV2(output_file, snapshot_id, parent_snapshot_id, sequence_number, avro_compression)
    raise ValueError(f"Cannot write manifest list for table version: {format_version}")


def _schemas(format_version: TableVersion) -> tuple[Schema, Schema]:
    """A list's (file schema, record schema), as pyiceberg's writer takes them."""
    return MANIFEST_LIST_FILE_SCHEMAS[format_version], MANIFEST_LIST_FILE_SCHEMAS[DEFAULT_READ_VERSION]


def _enter(writer: ManifestListWriter) -> None:
    version = writer._format_version
    writer._writer = encoded_output(
        writer._output_file, ("manifest list", version), lambda: _schemas(version), "manifest_file", writer._meta
    )
    writer._writer.__enter__()


class _KnownLayoutV1(ManifestListWriterV1):
    def __enter__(self) -> ManifestListWriter:
        _enter(self)
        return self


class _KnownLayoutV2(ManifestListWriterV2):
    def __enter__(self) -> ManifestListWriter:
        _enter(self)
        return self
