"""End states of the fault-injection cases, checked and collected for the table printed after the suite.

Every case reads its table back with iceberg-rust (through DataFusion), a
reader icesink did not write, and proves three things: no input row is
missing, none is there twice, and every staged checkpoint is in exactly one
snapshot (the snapshots' ``icesink.checkpoint-ids`` ranges neither overlap
nor leave gaps).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog


@dataclass(frozen=True)
class Outcome:
    case: str
    catalog: str
    rows: int
    lost: int
    duplicated: int
    checkpoints: int
    checkpoints_not_once: int

    @property
    def passed(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.checkpoints_not_once == 0


# Checked in this process and not yet attached to a test's report. The report carries them to the process
# that prints the summary (the one process, or the controller of `make test`'s two), see tests/conftest.py.
UNREPORTED: list[Outcome] = []
REPORT_PROPERTY = "icesink-outcomes"


def take_unreported() -> list[dict[str, Any]]:
    taken = [asdict(outcome) for outcome in UNREPORTED]
    UNREPORTED.clear()
    return taken


def iceberg_rust_sql(table: Any, sql: str) -> pa.Table:
    """``sql`` over the table registered as ``t`` in DataFusion, read by iceberg-rust's table provider."""
    from datafusion import SessionContext
    from pyiceberg.table import StaticTable

    # The catalog's FileIO properties (an object store's endpoint and keys) go to iceberg-rust's FileIO.
    properties = dict(table.io.properties)
    if "s3.endpoint" in properties:  # iceberg-rust addresses buckets as host names unless told otherwise
        properties.setdefault("s3.path-style-access", "true")
    context = SessionContext()
    context.register_table("t", StaticTable.from_metadata(table.metadata_location, properties=properties))
    return context.sql(sql).to_arrow_table()


def read_with_iceberg_rust(config: CatalogConfig, identifier: str, columns: str = "*") -> pa.Table:
    return iceberg_rust_sql(open_catalog(config).load_table(identifier), f"SELECT {columns} FROM t")


def checkpoint_counts(config: CatalogConfig, identifier: str) -> dict[tuple[str, int], int]:
    """How many snapshots of the current history hold each (job, checkpoint)."""
    table = open_catalog(config).load_table(identifier)
    counts: Counter[tuple[str, int]] = Counter()
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is None or summary["icesink.job-id"] is None:
            continue
        first, _, last = summary["icesink.checkpoint-ids"].partition("-")
        for checkpoint in range(int(first), int(last or first) + 1):
            counts[(summary["icesink.job-id"], checkpoint)] += 1
    return dict(counts)


def check_outcome(
    case: str,
    config: CatalogConfig,
    identifier: str,
    expected_ids: list[int] | None = None,
    expected_rows: list[dict[str, Any]] | None = None,
    id_column: str = "id",
) -> Outcome:
    """Read the table with iceberg-rust, record the outcome, and fail the test unless it is exact."""
    from icesink.catalog.ledger import Ledger

    if expected_rows is None:
        quoted = '"' + id_column.replace('"', '""') + '"'
        actual = read_with_iceberg_rust(config, identifier, quoted).column(id_column).to_pylist()
        expected = list(expected_ids or [])
    else:
        table = read_with_iceberg_rust(config, identifier)
        rows = table.to_pylist()
        actual = [tuple(sorted(r.items())) for r in rows]
        expected = [tuple(sorted(r.items())) for r in expected_rows]
    have, want = Counter(actual), Counter(expected)
    staged = {(r.job_id, r.checkpoint_id) for r in Ledger(config).for_table(identifier) if r.manifests.present()}
    counts = checkpoint_counts(config, identifier)
    outcome = Outcome(
        case=case,
        catalog="postgresql" if config.uri.startswith("postgresql") else "sqlite",
        rows=len(actual),
        lost=sum((want - have).values()),
        duplicated=sum((have - want).values()),
        checkpoints=len(staged),
        checkpoints_not_once=sum(1 for c in staged if counts.get(c, 0) != 1),
    )
    UNREPORTED.append(outcome)
    assert outcome.passed, outcome
    return outcome


def format_outcomes(outcomes: list[Outcome]) -> str:
    headers = ["case", "catalog", "rows", "lost", "duplicated", "checkpoints", "not exactly once", "result"]
    rows = [
        [
            o.case,
            o.catalog,
            o.rows,
            o.lost,
            o.duplicated,
            o.checkpoints,
            o.checkpoints_not_once,
            "ok" if o.passed else "FAILED",
        ]
        for o in outcomes
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=False)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)) for row in [headers, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def read_with_iceberg_java(
    python: Path, metadata_location: str, columns: list[str], options: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Iceberg 1.9.2's Java reader, through Spark 3.5 in its own environment (``java_reader`` fixture)."""
    return read_many_with_iceberg_java(python, [(metadata_location, columns, options or {})])[0]


def _json_lines_of(command: list[str], tables: int, env: dict[str, str] | None = None) -> list[list[dict[str, Any]]]:
    import json
    import subprocess

    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, f"{command[1]} exited {done.returncode}: {done.stderr[-3000:]}"
    rows: list[list[dict[str, Any]]] = [[] for _ in range(tables)]
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            rows[record["table"]].append(record["row"])
    return rows


def read_many_with_iceberg_java(python: Path, tables: list[Any]) -> list[list[dict[str, Any]]]:
    """Several tables in one JVM (starting Spark 3.5 is most of the cost)."""
    import json
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    command = [str(python), str(Path(__file__).parent / "java_reader.py"), json.dumps(tables)]
    return _json_lines_of(command, len(tables), env)


def read_with_duckdb(*metadata_locations: str) -> list[list[dict[str, Any]]]:
    """DuckDB 1.5's ``iceberg_scan`` of each table, in a child process (see ``tests/helpers/duckdb_reader.py``)."""
    import sys

    command = [sys.executable, str(Path(__file__).parent / "duckdb_reader.py"), *metadata_locations]
    return _json_lines_of(command, len(metadata_locations))


def query_with_duckdb(sql: str) -> list[dict[str, Any]]:
    """The rows of one DuckDB query (its iceberg and avro extensions loaded), in a child process."""
    import sys

    command = [sys.executable, str(Path(__file__).parent / "duckdb_reader.py"), "--sql", sql]
    return _json_lines_of(command, 1)[0]
