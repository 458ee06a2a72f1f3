"""Manifest files: executor file records as entries, delta manifests, delete manifests.

Releases before revision 0018 staged a checkpoint's files as a *delta manifest* (a hand-off format, as in
Iceberg's Flink sink), whose entries are re-added under the real snapshot id when the checkpoint is committed;
the committer still reads such manifests. Checkpoints are now staged in their ledger rows.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    DEFAULT_READ_VERSION,
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV1,
    ManifestWriterV2,
    _inherit_from_manifest,
    data_file_with_partition,
    manifest_entry_schema_with_data_file,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record, TableVersion
from pyiceberg.types import FloatType, IntegerType, ListType, NestedField, StringType, StructType, UUIDType

from icesink.iceberg import check_pyiceberg_version
from icesink.iceberg.avro_files import KnownSchemaAvroFile, encoded_output
from icesink.results import FileContent, FileRecord

check_pyiceberg_version()

STAGING_SNAPSHOT_ID = 0

_CONTENT = {
    FileContent.DATA: DataFileContent.DATA,
    FileContent.POSITION_DELETES: DataFileContent.POSITION_DELETES,
    FileContent.EQUALITY_DELETES: DataFileContent.EQUALITY_DELETES,
}


# ``referenced_data_file`` (field 143) is optional in format v2, but pyiceberg's v2 entry schema leaves it
# out. icesink's delete manifests carry it: a position delete file whose rows all name one data file says
# which, and readers (Iceberg Java, iceberg-rust) skip it for every other file. Delete-file records get one
# slot more than pyiceberg's v2 layout for it, written and read with the field added to both schemas.
REFERENCED_DATA_FILE_FIELD_ID = 143
_REFERENCED_DATA_FILE = NestedField(REFERENCED_DATA_FILE_FIELD_ID, "referenced_data_file", StringType(), required=False)
_V2_SLOTS = len(DATA_FILE_TYPE[2].fields)


def referenced_data_file(data_file: DataFile) -> str | None:
    """The one data file a position delete file's rows all name, when its manifest entry says so."""
    data: list[object] = data_file._data
    value = data[_V2_SLOTS] if len(data) > _V2_SLOTS else None
    return value if isinstance(value, str) else None


def _with_reference_slot(data_file: DataFile, value: str | None = None) -> DataFile:
    if len(data_file._data) == _V2_SLOTS:
        data_file._data.append(value)
    return data_file


def _with_referenced_field(struct: StructType) -> StructType:
    if any(f.field_id == REFERENCED_DATA_FILE_FIELD_ID for f in struct.fields):
        return struct
    return StructType(*struct.fields, _REFERENCED_DATA_FILE)


def _delete_entry_read_schema() -> Schema:
    base = MANIFEST_ENTRY_SCHEMAS[2]
    return Schema(
        *[
            NestedField(f.field_id, f.name, _with_referenced_field(f.field_type), required=f.required, doc=f.doc)
            if f.field_id == DATA_FILE_FIELD_ID and isinstance(f.field_type, StructType)
            else f
            for f in base.fields
        ]
    )


_ENTRY_TYPES: dict[int, Any] = {-1: ManifestEntry, 2: DataFile}
_ENTRY_ENUMS: dict[int, Any] = {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}


_DELETE_ENTRY_READ_SCHEMA: Schema | None = None


def fetch_entries(io: FileIO, manifest: ManifestFile, discard_deleted: bool = True) -> list[ManifestEntry]:
    """A manifest's entries as pyiceberg reads them, plus ``referenced_data_file`` of delete files."""
    global _DELETE_ENTRY_READ_SCHEMA
    if manifest.content == ManifestContent.DELETES:
        if _DELETE_ENTRY_READ_SCHEMA is None:
            _DELETE_ENTRY_READ_SCHEMA = _delete_entry_read_schema()
        read_schema = _DELETE_ENTRY_READ_SCHEMA
    else:
        read_schema = MANIFEST_ENTRY_SCHEMAS[DEFAULT_READ_VERSION]
    with KnownSchemaAvroFile(
        io.new_input(manifest.manifest_path), read_schema, read_types=_ENTRY_TYPES, read_enums=_ENTRY_ENUMS
    ) as reader:
        return [
            _inherit_from_manifest(entry, manifest)
            for entry in reader
            if not discard_deleted or entry.status != ManifestEntryStatus.DELETED
        ]


def to_data_file(record: FileRecord, format_version: int, partition_type: StructType | None = None) -> DataFile:
    """The manifest entry payload of a file written by an executor. Given its spec's ``partition_type``, its
    partition values are those pyiceberg's manifest reader would give (as the table's committed files have them):
    a file staged in the ledger then compares with them as one read back from a manifest would."""
    data_file = DataFile.from_args(
        _table_format_version=cast(TableVersion, format_version),
        content=_CONTENT[record.content],
        file_path=record.path,
        file_format=FileFormat.PARQUET,
        partition=_as_read(record.partition, partition_type),
        record_count=record.record_count,
        file_size_in_bytes=record.file_size_bytes,
        column_sizes=record.column_sizes,
        value_counts=record.value_counts,
        null_value_counts=record.null_value_counts,
        nan_value_counts=record.nan_value_counts,
        lower_bounds=record.lower_bounds,
        upper_bounds=record.upper_bounds,
        split_offsets=list(record.split_offsets),
        equality_ids=None if record.equality_ids is None else list(record.equality_ids),
        sort_order_id=None,
    )
    data_file.spec_id = record.spec_id
    if record.content != FileContent.DATA:
        _with_reference_slot(data_file, record.referenced_data_file)
    return data_file


def _as_read(values: tuple[Any, ...], partition_type: StructType | None) -> Record:
    """Partition values as a manifest gives them back: a uuid (which files carry as its 16 bytes) as a
    :class:`uuid.UUID`, a float rounded to the 32 bits a manifest stores it in; every other value (a double among them:
    manifests store and icesink reads its 64 bits) as it is."""
    if partition_type is None:
        return Record(*values)
    read = []
    for value, field in zip(values, partition_type.fields, strict=False):
        kind = field.field_type
        if isinstance(value, bytes) and isinstance(kind, UUIDType):
            value = uuid.UUID(bytes=value)
        elif isinstance(value, float) and isinstance(kind, FloatType):
            value = struct.unpack("<f", struct.pack("<f", value))[0]
        read.append(value)
    return Record(*read)


EQUALITY_IDS_FIELD_ID = 135
EQUALITY_IDS_ELEMENT_ID = 136
DATA_FILE_FIELD_ID = 2
PARTITION_FIELD_ID = 102


def avro_name(name: str) -> str:
    """``name`` as a valid Avro name, the way Iceberg Java sanitises field names for Avro files.

    Avro names are ``[A-Za-z_][A-Za-z0-9_]*``. Iceberg Java (``AvroSchemaUtil.makeCompatibleName``)
    replaces a leading digit ``d`` by ``_d`` and any other character outside that set by ``_x``
    and its upper-case hex code point; readers find partition fields by field id, so the name
    only has to parse. Unlike Java, non-ASCII letters are replaced too: strict Avro readers
    (DuckDB) refuse them.
    """
    out = []
    for i, char in enumerate(name):
        if char == "_" or (char.isascii() and (char.isalpha() or (i > 0 and char.isdigit()))):
            out.append(char)
        elif char.isascii() and char.isdigit():
            out.append(f"_{char}")
        else:
            out.append(f"_x{ord(char):X}")
    return "".join(out) or "_"


def _sanitised_partition(struct: StructType) -> StructType:
    return StructType(
        *[
            NestedField(f.field_id, avro_name(f.name), f.field_type, required=f.required, doc=f.doc)
            for f in struct.fields
        ]
    )


def _spec_conformant(schema: Schema, int_equality_ids: bool) -> Schema:
    """The manifest entry schema with Avro-safe partition names (and ``equality_ids`` as ``list<int>``)."""

    def fix_data_file(struct: StructType) -> StructType:
        fields = []
        for f in struct.fields:
            if f.field_id == PARTITION_FIELD_ID and isinstance(f.field_type, StructType):
                f = NestedField(f.field_id, f.name, _sanitised_partition(f.field_type), required=f.required, doc=f.doc)
            elif f.field_id == EQUALITY_IDS_FIELD_ID and int_equality_ids:
                element = ListType(EQUALITY_IDS_ELEMENT_ID, IntegerType(), element_required=True)
                f = NestedField(f.field_id, f.name, element, required=f.required, doc=f.doc)
            fields.append(f)
        return _with_referenced_field(StructType(*fields)) if int_equality_ids else StructType(*fields)

    return Schema(
        *[
            NestedField(f.field_id, f.name, fix_data_file(f.field_type), required=f.required, doc=f.doc)
            if f.field_id == DATA_FILE_FIELD_ID and isinstance(f.field_type, StructType)
            else f
            for f in schema.fields
        ]
    )


class _ConformantWriter(ManifestWriter):
    """Writes the entry schema with Avro-safe partition names; delete manifests also get int ``equality_ids``."""

    _int_equality_ids = False

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        partition = self._spec.partition_type(self._schema)
        layout = ("manifest", self.version, partition, self._int_equality_ids)

        def schemas() -> tuple[Schema, Schema]:
            return (
                _entry_schema(self.version, partition, self._int_equality_ids),
                _entry_schema(DEFAULT_READ_VERSION, partition, self._int_equality_ids),
            )

        return encoded_output(self._output_file, layout, schemas, "manifest_entry", self._meta)


def _entry_schema(version: TableVersion, partition: StructType, int_equality_ids: bool) -> Schema:
    data_file = data_file_with_partition(format_version=version, partition_type=partition)
    return _spec_conformant(manifest_entry_schema_with_data_file(version, data_file), int_equality_ids)


class DataManifestWriter(_ConformantWriter, ManifestWriterV2):
    """A v2 manifest of data files."""


class DataManifestWriterV1(_ConformantWriter, ManifestWriterV1):
    """A v1 manifest of data files."""


class DeleteManifestWriter(_ConformantWriter, ManifestWriterV2):
    """A v2 manifest of delete files: ``content: deletes`` and spec-conformant ``equality_ids``."""

    _int_equality_ids = True

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}

    def prepare_entry(self, entry: ManifestEntry) -> ManifestEntry:
        # Entries pyiceberg read (with its v2 layout) get the slot the record schema expects.
        _with_reference_slot(entry.data_file)
        return super().prepare_entry(entry)


def compression(metadata: TableMetadata) -> AvroCompressionCodec:
    value = metadata.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    return cast(AvroCompressionCodec, value)


def _schema_of_spec(metadata: TableMetadata, spec: PartitionSpec) -> Schema:
    """The newest schema holding every source column of ``spec``: a spec of files written before one of its
    source columns was dropped still needs that column's type for the manifest's partition summaries."""
    sources = {f.source_id for f in spec.fields}
    for schema in sorted(metadata.schemas, key=lambda s: s.schema_id, reverse=True):
        if sources <= set(schema._lazy_id_to_field):
            return schema
    return metadata.schema()


def manifest_writer(
    metadata: TableMetadata, spec: PartitionSpec, output: OutputFile, snapshot_id: int, deletes: bool
) -> ManifestWriter:
    """A writer for a data or delete manifest of ``spec``, as the table's format version wants it."""
    schema = _schema_of_spec(metadata, spec)
    if deletes:
        if metadata.format_version < 2:
            raise ValueError("delete files need an Iceberg format version 2 table")
        return DeleteManifestWriter(spec, schema, output, snapshot_id, compression(metadata))
    if metadata.format_version == 1:
        return DataManifestWriterV1(spec, schema, output, snapshot_id, compression(metadata))
    if metadata.format_version == 2:
        return DataManifestWriter(spec, schema, output, snapshot_id, compression(metadata))
    raise ValueError(f"icesink writes Iceberg format versions 1 and 2, not {metadata.format_version}")


@dataclass(frozen=True)
class AddedFile:
    """A data or delete file a snapshot adds; ``sequence_number`` None means the snapshot's own.

    Maintenance gives the files it writes an older data sequence number: a
    compaction's output that of the snapshot it started from (equality deletes
    committed since still apply to it), converted position deletes that of the
    equality delete they replace.
    """

    file: DataFile
    sequence_number: int | None = None


def write_added(
    metadata: TableMetadata,
    spec_id: int,
    output: OutputFile,
    snapshot_id: int,
    files: Sequence[DataFile | AddedFile],
    deletes: bool,
) -> ManifestFile:
    """A manifest listing ``files`` as added by ``snapshot_id``.

    A file without its own data sequence number inherits the snapshot's when
    the manifest list is written (the Iceberg spec's inheritance).
    """
    writer = manifest_writer(metadata, metadata.specs()[spec_id], output, snapshot_id, deletes)
    with writer:
        for added in files:
            data_file, sequence = (added, None) if isinstance(added, DataFile) else (added.file, added.sequence_number)
            writer.add(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=snapshot_id,
                    sequence_number=sequence,
                    file_sequence_number=None,
                    data_file=data_file,
                )
            )
    return writer.to_manifest_file()


@dataclass(frozen=True)
class DeltaManifest:
    """A staged manifest: where it is and which partition spec its entries use."""

    path: str
    spec_id: int
    length: int
    deletes: bool = False


def write_delta_manifest(
    metadata: TableMetadata, io: FileIO, path: str, spec_id: int, files: Sequence[DataFile], deletes: bool = False
) -> DeltaManifest:
    """Write the data (or delete) files of one checkpoint as an Avro manifest pyiceberg's reader accepts, as
    releases before inline files staged a checkpoint (the committer and gc still read such manifests: an upgrade
    may find checkpoints staged so)."""
    manifest = write_added(metadata, spec_id, io.new_output(path), STAGING_SNAPSHOT_ID, files, deletes)
    return DeltaManifest(path=path, spec_id=spec_id, length=manifest.manifest_length, deletes=deletes)


def read_delta_manifest(io: FileIO, manifest: DeltaManifest) -> list[DataFile]:
    """The files of a staged manifest; raises the reader's own error if it is missing or corrupt."""
    handle = ManifestFile.from_args(
        manifest_path=manifest.path,
        manifest_length=manifest.length,
        partition_spec_id=manifest.spec_id,
        content=ManifestContent.DELETES if manifest.deletes else ManifestContent.DATA,
        added_snapshot_id=STAGING_SNAPSHOT_ID,
    )
    return [entry.data_file for entry in fetch_entries(io, handle)]
