"""Many tables from one stream: atomic group commits, and a Debezium stream against one stream per table.

Part 1 (no Spark): the commit of one checkpoint touching 1, 10 and 50 tables. icesink's group commit
(every table's snapshot and the ledger in one transaction of the catalog database) against the same
tables committed one by one, as that many single-table streams would (a transaction per table,
plus the ledger's own). Each checkpoint adds one small Parquet file to every table; the staging is
not timed. Reported: median milliseconds per checkpoint, and catalog transactions per checkpoint
(counted by SQLAlchemy's commit events on the catalog's engine).

Part 2 (Spark 4.3, local[2]): the same Debezium events for 20 tables (an upsert key, a decimal, a
timestamp, a string) read from JSON lines as Kafka holds them. ``icesink.debezium`` in one stream
against 20 streams, one per table (each reading only its topic), run one after the other. Reported:
rows per second over the whole run, median commit latency per micro-batch (the inline committer's
calls, timed), and catalog transactions per micro-batch.

    .venv/bin/python bench/many_tables.py [--tables 1,10,50] [--checkpoints 15] [--catalog-uri URI]
                                          [--stream-tables 20] [--batches 5] [--events 20000] [--skip-spark]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.figures import record_values
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import engine, upgrade
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.staging import TableResults, stage_tables
from icesink.iceberg.describe import writer_spec
from icesink.paths import file_uri
from icesink.writer.task import TaskWriter

ROWS = pa.table({"id": pa.array(range(100), pa.int64()), "name": pa.array([f"n{i}" for i in range(100)])})


@contextlib.contextmanager
def counted_transactions(config: CatalogConfig) -> Iterator[list[int]]:
    """How many transactions the catalog's engine commits inside the block (the list's one element)."""
    from sqlalchemy import event

    count = [0]

    def on_commit(_: Any) -> None:
        count[0] += 1

    bound = engine(config)
    event.listen(bound, "commit", on_commit)
    try:
        yield count
    finally:
        event.remove(bound, "commit", on_commit)


def catalog_at(root: Path, name: str, uri: str | None) -> CatalogConfig:
    if uri is None:
        uri = f"sqlite:///{root / (name + '.db')}"
    config = CatalogConfig(f"{name}_{uuid.uuid4().hex[:6]}", uri, file_uri(root / name))
    upgrade(config)
    return config


def create_tables(config: CatalogConfig, prefix: str, count: int) -> list[str]:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("bench")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType()))
    names = [f"bench.{prefix}_{i:02d}" for i in range(count)]
    for name in names:
        catalog.create_table(name, schema=schema)
    return names


def stage(config: CatalogConfig, names: list[str], job: str, checkpoint: int, atomic: bool) -> None:
    catalog = open_catalog(config)
    written = []
    for name in names:
        table = catalog.load_table(name)
        writer = TaskWriter(writer_spec(table, name, job).for_checkpoint(checkpoint), task_id=0, attempt=0)
        writer.write(ROWS)
        written.append(TableResults(table, name, [writer.complete()]))
    assert stage_tables(Ledger(config), job, checkpoint, written, atomic=atomic)


def group_commit_latency(root: Path, uri: str | None, tables: int, checkpoints: int) -> dict[str, Any]:
    """One checkpoint into ``tables`` tables: atomic group commit vs table by table."""
    results: dict[str, Any] = {"tables": tables}
    for mode in ("atomic", "one by one"):
        config = catalog_at(root, f"commit_{tables}_{mode.replace(' ', '_')}", uri)
        names = create_tables(config, "t", tables)
        committer = TableCommitter.of(config)
        seconds, transactions = [], []
        for checkpoint in range(checkpoints):
            stage(config, names, "job", checkpoint, atomic=mode == "atomic")
            with counted_transactions(config) as count:
                started = time.perf_counter()
                if mode == "atomic":
                    committer.commit_atomic("job")
                else:
                    for name in names:
                        committer.commit_pending(name, "job")
                seconds.append(time.perf_counter() - started)
            transactions.append(count[0])
        results[mode] = {
            "median_ms": round(statistics.median(seconds) * 1000, 1),
            "transactions": statistics.median(transactions),
        }
    results["ratio"] = round(results["one by one"]["median_ms"] / results["atomic"]["median_ms"], 2)
    return results


# --- part 2: Debezium events --------------------------------------------------------------------------------------
FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "12"},
        "field": "amount",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "updated"},
]
KAFKA_SCHEMA = "topic string, partition int, offset long, key string, value string"


def _schema_envelope(topic: str) -> dict[str, Any]:
    row = {"type": "struct", "fields": FIELDS, "optional": True, "name": f"{topic}.Value"}
    return {
        "type": "struct",
        "fields": [{**row, "field": "before"}, {**row, "field": "after"}, {"type": "string", "field": "op"}],
        "optional": False,
        "name": f"{topic}.Envelope",
    }


def write_events(directory: Path, tables: int, batches: int, events: int) -> int:
    """``batches`` files of ``events`` Debezium records spread over ``tables`` topics; keys repeat (updates)."""
    directory.mkdir(parents=True, exist_ok=True)
    envelopes = {t: _schema_envelope(f"db.public.t{t:02d}") for t in range(tables)}
    offset = 0
    for number in range(batches):
        lines = []
        for i in range(events):
            t = i % tables
            key = (number * events + i) // tables % 5000  # a key space of 5,000 per table: inserts, then updates
            topic = f"db.public.t{t:02d}"
            amount = base64.b64encode((key * 7).to_bytes(4, "big", signed=True)).decode()
            after = {"id": key, "name": f"name {key}", "amount": amount, "updated": 1_700_000_000_000_000 + i}
            value = {
                "schema": envelopes[t],
                "payload": {
                    "before": None,
                    "after": after,
                    "op": "u",
                    "source": {"schema": "public", "table": f"t{t:02d}", "lsn": offset},
                },
            }
            key_json = {"schema": {"type": "struct", "fields": [FIELDS[0]]}, "payload": {"id": key}}
            record = {
                "topic": topic,
                "partition": 0,
                "offset": offset,
                "key": json.dumps(key_json),
                "value": json.dumps(value),
            }
            lines.append(json.dumps(record))
            offset += 1
        path = directory / f"part-{number:05d}.json"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.utime(path, (1_750_000_000 + number, 1_750_000_000 + number))
    return batches * events


class CommitTimer:
    """Times every call of the inline committer in this process (the driver)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._originals: dict[str, Any] = {}

    def __enter__(self) -> CommitTimer:
        for name in ("commit_atomic", "commit_pending"):
            original = getattr(TableCommitter, name)
            self._originals[name] = original

            def timed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds.append(time.perf_counter() - started)

            setattr(TableCommitter, name, timed)
        return self

    def __exit__(self, *_: object) -> None:
        for name, original in self._originals.items():
            setattr(TableCommitter, name, original)


def debezium_streams(root: Path, uri: str | None, tables: int, batches: int, events: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import icesink
    from bench._spark import local_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = local_spark()
    source = root / "events"
    total = write_events(source, tables, batches, events)

    def run(config: CatalogConfig, name: str, topic: str | None) -> None:
        df = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        if topic is not None:
            df = df.where(F.col("topic") == topic)
        icesink.stream(
            df,
            tables=icesink.debezium("inventory"),
            checkpoint_location=str(root / "ckpt" / name),
            trigger={"availableNow": True},
            catalog=config,
        ).awaitTermination()

    results: dict[str, Any] = {"tables": tables, "events": total}
    # A warm-up run so that neither side pays the JVM's and Python workers' first start.
    warm = catalog_at(root, "warm", uri)
    run(warm, "warm", "db.public.t00")
    for mode in ("one stream", f"{tables} streams"):
        config = catalog_at(root, mode.replace(" ", "_"), uri)
        with CommitTimer() as timer, counted_transactions(config) as count:
            started = time.perf_counter()
            if mode == "one stream":
                run(config, "one", None)
            else:
                for t in range(tables):
                    run(config, f"t{t:02d}", f"db.public.t{t:02d}")
            seconds = time.perf_counter() - started
        commits = [s for s in timer.seconds if s > 0]
        results[mode] = {
            "rows_per_second": round(total / seconds),
            "seconds": round(seconds, 1),
            "commit_ms_median": round(statistics.median(commits) * 1000, 1) if commits else None,
            "transactions_per_batch": round(count[0] / batches, 1),
        }
        table = icesink.read("inventory.t00", catalog=config)
        assert table.num_rows == min(5000, batches * events // tables), table.num_rows
    results["throughput_ratio"] = round(
        results["one stream"]["rows_per_second"] / results[f"{tables} streams"]["rows_per_second"], 2
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", default="1,10,50")
    parser.add_argument("--checkpoints", type=int, default=15)
    parser.add_argument("--catalog-uri", default=None, help="A PostgreSQL URL; default: a SQLite file per case.")
    parser.add_argument("--stream-tables", type=int, default=20)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="icesink-many-"))
    try:
        report: dict[str, Any] = {"catalog": "postgresql" if args.catalog_uri else "sqlite", "group_commit": []}
        for count in map(int, args.tables.split(",")):
            report["group_commit"].append(group_commit_latency(root, args.catalog_uri, count, args.checkpoints))
            print(json.dumps(report["group_commit"][-1]), flush=True)
        if not args.skip_spark:
            report["debezium"] = debezium_streams(root, args.catalog_uri, args.stream_tables, args.batches, args.events)
            print(json.dumps(report["debezium"]), flush=True)
        print(json.dumps(report, indent=2))
        record_figures(args, report)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def record_figures(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The group commits' medians into bench/results/many_tables.json: a group per table count and catalog.

    A run measures one catalog, SQLite (the default) or PostgreSQL (--catalog-uri postgresql...): its groups
    replace theirs and keep the other catalog's. Other databases are not recorded; nor is the Debezium part.
    """
    if args.catalog_uri is None:
        catalog = "SQLite"
    elif args.catalog_uri.startswith("postgresql"):
        catalog = "PostgreSQL"
    else:
        print("many_tables: not recorded: the chart is of SQLite and PostgreSQL catalogs", file=sys.stderr)
        return

    def group(tables: int) -> str:
        # The chart's first group names the unit ("1 table (SQLite)"), the others give only the count.
        return f"{tables} table ({catalog})" if (tables, catalog) == (1, "SQLite") else f"{tables} ({catalog})"

    results = report["group_commit"]
    record_values(
        "many_tables",
        {
            "icesink group commit (one transaction)": {group(r["tables"]): r["atomic"]["median_ms"] for r in results},
            "one table at a time": {group(r["tables"]): r["one by one"]["median_ms"] for r in results},
        },
        " ".join(["bench/many_tables.py", *map(_without_password, sys.argv[1:])]),
    )


def _without_password(argument: str) -> str:
    """A command-line argument as the chart may show it: a database URL's password masked."""
    from sqlalchemy.engine import make_url

    flag, equals, value = argument.partition("=") if argument.startswith("--") else ("", "", argument)
    if "://" not in value:
        return argument
    return flag + equals + make_url(value).render_as_string(hide_password=True)


if __name__ == "__main__":
    main()
