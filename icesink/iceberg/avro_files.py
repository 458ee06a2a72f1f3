"""Avro files of manifests, with each schema's reader and writer built once per process.

pyiceberg builds a file's reader (or writer) from its schema at every file: walks of the schema that cost a
few milliseconds, most of writing or reading a small manifest. Manifests of one table layout all carry the
same schema, and a stream into many tables writes and reads them by the hundred each micro-batch: here the
reader of a (file schema, read schema) pair and the writer of a layout are made once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from pyiceberg.avro.codecs import AVRO_CODEC_KEY, CODEC_MAPPING_ICEBERG_TO_AVRO
from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import _SCHEMA_KEY, MAGIC, META_SCHEMA, SYNC_SIZE, AvroFile, AvroFileHeader, AvroOutputFile
from pyiceberg.avro.reader import Reader
from pyiceberg.avro.resolver import construct_reader, construct_writer, resolve_reader, resolve_writer
from pyiceberg.avro.writer import Writer
from pyiceberg.io import OutputFile
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from icesink.iceberg import check_pyiceberg_version

check_pyiceberg_version()

_LIMIT = 256  # layouts remembered; more are built again (a process writing that many layouts is rare)


class KnownSchemaAvroFile(AvroFile[Any]):
    """pyiceberg's Avro reader, with the reader of each (file schema, read schema) pair built once: a file's
    schema is its JSON text in the header. The read schema must live as long as the process (a module's
    constant): it is known by identity, as pyiceberg's schemas are not hashable."""

    def __enter__(self) -> AvroFile[Any]:
        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = self._read_header()
        assert self.read_schema is not None
        self.schema, self.reader = self._known_reader(self.header.meta[_SCHEMA_KEY])
        return self

    def _read_header(self) -> AvroFileHeader:
        # pyiceberg builds the header's reader at every file (tens of microseconds): it is always the same.
        return _HEADER_READER.read(self.decoder)  # type: ignore[no-any-return]

    def _known_reader(self, avro_json: str) -> tuple[Schema, Reader]:
        assert self.read_schema is not None
        key = (avro_json, id(self.read_schema))
        known = _READERS.get(key)
        if known is None:
            if len(_READERS) > _LIMIT:
                _READERS.clear()
            schema = AvroSchemaConversion().avro_to_iceberg(json.loads(avro_json))
            reader = resolve_reader(schema, self.read_schema, self.read_types, self.read_enums)
            known = _READERS[key] = (schema, reader)
        return known


_READERS: dict[tuple[str, int], tuple[Schema, Reader]] = {}


_HEADER_READER = construct_reader(META_SCHEMA, {-1: AvroFileHeader})


@dataclass(frozen=True)
class _Encoding:
    """How records of one layout are written: the file's schema, its Avro JSON and the record writer."""

    file_schema: Schema
    avro_json: str
    writer: Writer


_ENCODINGS: dict[Hashable, _Encoding] = {}
_HEADER_WRITER = construct_writer(META_SCHEMA)


def encoded_output(
    output_file: OutputFile,
    layout: Hashable,
    schemas: Callable[[], tuple[Schema, Schema]],
    schema_name: str,
    metadata: dict[str, str],
) -> AvroOutputFile[Any]:
    """An Avro output file of records of ``layout``, whose (file schema, record schema) ``schemas`` builds the
    first time the layout is written."""
    encoding = _ENCODINGS.get(layout)
    if encoding is None:
        if len(_ENCODINGS) > _LIMIT:
            _ENCODINGS.clear()
        file_schema, record_schema = schemas()
        avro = AvroSchemaConversion().iceberg_to_avro(file_schema, schema_name=schema_name)
        writer = resolve_writer(record_schema=record_schema, file_schema=file_schema)
        encoding = _ENCODINGS[layout] = _Encoding(file_schema, json.dumps(avro), writer)
    return _EncodedOutputFile(output_file, encoding, schema_name, metadata)


class _EncodedOutputFile(AvroOutputFile[Any]):
    """pyiceberg's Avro output file, with its layout's schema, JSON and writer made before."""

    def __init__(
        self, output_file: OutputFile, encoding: _Encoding, schema_name: str, metadata: dict[str, str]
    ) -> None:
        self.output_file = output_file
        self.file_schema = encoding.file_schema
        self.schema_name = schema_name
        self.sync_bytes = os.urandom(SYNC_SIZE)
        self.writer = encoding.writer
        self.metadata = metadata
        self._avro_json = encoding.avro_json

    def _write_header(self) -> None:
        codec_name = self.metadata.get(AVRO_CODEC_KEY, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
        codec_name = CODEC_MAPPING_ICEBERG_TO_AVRO.get(codec_name, codec_name)
        meta = {**self.metadata, _SCHEMA_KEY: self._avro_json, AVRO_CODEC_KEY: codec_name}
        _HEADER_WRITER.write(self.encoder, AvroFileHeader(MAGIC, meta, self.sync_bytes))
