"""Reads Iceberg tables with Iceberg's Java reference implementation and prints their rows as JSON lines.

Runs in its own virtual environment (pyspark 3.5.9 and the Iceberg 1.9.2
Spark runtime jar shipped in ``snowpark-connect-deps-iceberg``), never in
icesink's: ``python java_reader.py JSON`` where JSON is a list of
``[metadata_json, [column, …]]`` or ``[metadata_json, [column, …], {read option: value}]``; one
Spark session reads them all and prints ``{"table": i, "row": {...}}`` per row.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import sys


def quoted(name: str) -> str:
    """A column name Spark takes literally: dots, spaces and backticks included."""
    return "`" + name.replace("`", "``") + "`"


def _plain(value: object) -> object:
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray):  # as the DuckDB reader prints them
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def main(tables: list[tuple[str, list[str]]]) -> None:
    import snowpark_connect_deps_iceberg
    from jvm_classes import QUICK_START, with_class_archive  # beside this file, which runs as a script
    from pyspark.sql import SparkSession

    jars = glob.glob(
        os.path.join(
            os.path.dirname(snowpark_connect_deps_iceberg.__file__), "jars", "iceberg-spark-runtime-3.5_2.12-*.jar"
        )
    )
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.extraJavaOptions", with_class_archive(QUICK_START))  # lives for seconds
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    for number, (metadata_location, columns, *options) in enumerate(tables):
        reader = spark.read.format("iceberg")
        for key, value in (options[0] if options else {}).items():
            reader = reader.option(key, value)
        frame = reader.load(metadata_location)
        for row in frame.select(*[quoted(c) for c in columns]).collect():
            # Structs as dicts, at any depth (a Row alone would print as a list of values).
            values = dict(zip(columns, (_plain(v) for v in row), strict=True))
            print(json.dumps({"table": number, "row": values}, default=str))
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
