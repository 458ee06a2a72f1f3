"""Reads Iceberg tables with DuckDB's iceberg extension and prints their rows as JSON lines.

Run as a child process (``python duckdb_reader.py METADATA_JSON [METADATA_JSON …]``, or ``--sql QUERY`` for the
rows of one query of DuckDB's own, such as ``read_avro`` of a manifest): DuckDB 1.5
aborts the whole process on some manifests it cannot parse, which must fail a test, not end the
test session. The extensions come from the ``duckdb-extension-iceberg`` and ``duckdb-extension-avro``
wheels and are loaded by path with automatic installation off, so nothing is downloaded.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import glob
import json
import math
import os
import sys
import uuid
from typing import Any


def _extension(module: Any) -> str:
    (path,) = glob.glob(os.path.join(os.path.dirname(module.__file__), "extensions", "**", "*.duckdb_extension"))
    return path


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    return value


def main(arguments: list[str]) -> None:
    connection = _connected()
    if arguments[:1] == ["--sql"]:
        _print_rows(connection.execute(arguments[1]), 0)
        return
    for number, location in enumerate(arguments):
        _print_rows(connection.execute("SELECT * FROM iceberg_scan(?)", [location]), number)


def _print_rows(cursor: Any, number: int) -> None:
    names = [d[0] for d in cursor.description]
    for row in cursor.fetchall():
        print(json.dumps({"table": number, "row": {n: _plain(v) for n, v in zip(names, row, strict=True)}}))


def _connected() -> Any:
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    connection = duckdb.connect()
    connection.execute("SET autoinstall_known_extensions = false")
    connection.execute("SET autoload_known_extensions = false")
    connection.execute("SET TimeZone = 'UTC'")
    for module in (duckdb_extension_avro, duckdb_extension_iceberg):
        connection.execute(f"LOAD '{_extension(module)}'")
    return connection


if __name__ == "__main__":
    main(sys.argv[1:])
