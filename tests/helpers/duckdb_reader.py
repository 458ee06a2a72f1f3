"""Reads Iceberg tables with DuckDB's iceberg extension and prints their rows as JSON lines.

Run as a child process (``python duckdb_reader.py METADATA_JSON [METADATA_JSON …]``): DuckDB 1.5
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


def main(locations: list[str]) -> None:
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    connection = duckdb.connect()
    connection.execute("SET autoinstall_known_extensions = false")
    connection.execute("SET autoload_known_extensions = false")
    connection.execute("SET TimeZone = 'UTC'")
    for module in (duckdb_extension_avro, duckdb_extension_iceberg):
        connection.execute(f"LOAD '{_extension(module)}'")
    for number, location in enumerate(locations):
        cursor = connection.execute("SELECT * FROM iceberg_scan(?)", [location])
        names = [d[0] for d in cursor.description]
        for row in cursor.fetchall():
            print(json.dumps({"table": number, "row": {n: _plain(v) for n, v in zip(names, row, strict=True)}}))


if __name__ == "__main__":
    main(sys.argv[1:])
