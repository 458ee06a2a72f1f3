"""A whole database through one Debezium stream, against Spark's own parse-and-write of the same records.

The records: change events of a PostgreSQL connector as Kafka Connect's JsonConverter writes them (schemas
enabled, with Debezium's source block), 60% inserts, 30% updates and 10% deletes each followed by its tombstone,
spread over ``--tables`` topics of two partitions each, one JSON-lines file per micro-batch (the columns Spark's
Kafka source gives). Every table has the same columns (a long key, text, a decimal(12, 2), a timestamp, an int,
a boolean), so that one Spark job can parse them all.

* **icesink**: ``icesink.stream(df, tables=icesink.debezium("bench"))`` over the files, a micro-batch a file,
  the inline committer, SQLite catalog: decoded, routed, collapsed by key, written as Parquet data and delete
  files and committed to every table atomically, micro-batch by micro-batch.
* **Spark alone** (the limit of the machine for these records): one batch job over the same files, ``from_json``
  of the envelope with the row's exact type, the rows written as zstd Parquet partitioned by topic. No keys,
  no deletes applied, no catalog: the cost of reading, parsing and encoding the records here.

The two alternate, ``--rounds`` times each (after a warm-up of each), in one process; reported: rows per
second of each, and icesink's share of Spark's. Then the same number of records spread over ``--many`` tables
instead: icesink's seconds there against its seconds over ``--tables``, whole and per micro-batch after the
first (which creates the tables), and the peak resident memory of Spark's Python workers in each. Last, the many
tables once more, each partitioned by ``bucket(--buckets, id)``: many more partitions a micro-batch than a task's
budget of open files, for the memory that takes. Every run's tables are checked against the generator's model
(every key's last row, deletes applied). With ``--general-too``, each round runs the stream once more with every
micro-batch routed the general way (two jobs, as before one-job writes): the one-job write against it in the same
rounds.

    .venv/bin/python bench/debezium_throughput.py [--tables 20] [--many 200] [--events 50000] [--batches 4]
                                                  [--rounds 2] [--skip-many] [--buckets 16] [--general-too]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._memory import PeakMemory
from bench.figures import Figures, record
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import upgrade
from icesink.paths import file_uri

KAFKA_SCHEMA = "topic string, partition int, offset long, key string, value string"


def _f(field: str, kind: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": optional, **extra, "field": field}


ROW_FIELDS = [
    _f("id", "int64", False),
    _f("name", "string"),
    _f(
        "amount",
        "bytes",
        name="org.apache.kafka.connect.data.Decimal",
        version=1,
        parameters={"scale": "2", "connect.decimal.precision": "12"},
    ),
    _f("updated", "int64", name="io.debezium.time.MicroTimestamp", version=1),
    _f("qty", "int32"),
    _f("active", "boolean"),
]
SOURCE_FIELDS = [
    _f("version", "string", False),
    _f("connector", "string", False),
    _f("name", "string", False),
    _f("ts_ms", "int64", False),
    _f("snapshot", "string", name="io.debezium.data.Enum", version=1, parameters={"allowed": "true,last,false"}),
    _f("db", "string", False),
    _f("sequence", "string"),
    _f("schema", "string", False),
    _f("table", "string", False),
    _f("txId", "int64"),
    _f("lsn", "int64"),
]
# The envelope's type for Spark's from_json: the row's exact JSON types (the decimal is base64 text: binary).
ROW_DDL = "id bigint, name string, amount binary, updated bigint, qty int, active boolean"
ENVELOPE_DDL = f"payload struct<before: struct<{ROW_DDL}>, after: struct<{ROW_DDL}>, op: string, ts_ms: bigint>"


def envelope_schema(topic: str) -> dict[str, Any]:
    row = {"type": "struct", "fields": ROW_FIELDS, "optional": True, "name": f"{topic}.Value"}
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "fields": SOURCE_FIELDS,
                "optional": False,
                "name": "io.debezium.connector.postgresql.Source",
                "field": "source",
            },
            _f("op", "string", False),
            _f("ts_ms", "int64"),
            {
                "type": "struct",
                "fields": [_f("id", "string", False), _f("total_order", "int64", False)],
                "optional": True,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
        ],
        "optional": False,
        "name": f"{topic}.Envelope",
        "version": 2,
    }


def key_schema(topic: str) -> dict[str, Any]:
    return {"type": "struct", "fields": [ROW_FIELDS[0]], "optional": False, "name": f"{topic}.Key"}


def _amount(cents: int) -> str:
    return base64.b64encode(cents.to_bytes(max(1, (cents.bit_length() + 8) // 8), "big", signed=True)).decode()


def write_events(directory: Path, tables: int, batches: int, events: int, seed: int = 7) -> dict[str, Any]:
    """The records, a file per micro-batch, and the model: every table's rows after them (key → row)."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    topics = [f"dbserver1.public.t{t:03d}" for t in range(tables)]
    schemas = {t: json.dumps(envelope_schema(t)) for t in topics}
    keys = {t: json.dumps(key_schema(t)) for t in topics}
    model: dict[str, dict[int, dict[str, Any]]] = {t.rsplit(".", 1)[1]: {} for t in topics}
    offsets: dict[tuple[str, int], int] = {}
    lsn = 10_000_000
    next_id = dict.fromkeys(topics, 1)
    records = 0
    for number in range(batches):
        lines = []
        for _ in range(events):
            topic = rng.choice(topics)
            table = topic.rsplit(".", 1)[1]
            rows = model[table]
            roll = rng.random()
            lsn += 1
            if roll < 0.6 or len(rows) < 10:
                key, op = next_id[topic], "c"
                next_id[topic] += 1
            else:
                key = rng.choice(list(rows)) if len(rows) < 50 else rng.randrange(1, next_id[topic])
                if key not in rows:
                    key, op = next_id[topic], "c"
                    next_id[topic] += 1
                else:
                    op = "u" if roll < 0.9 else "d"
            partition = key % 2
            if op == "d":
                after = None
                before = {"id": key, "name": None, "amount": None, "updated": None, "qty": None, "active": None}
                del rows[key]
            else:
                cents = rng.randrange(-(10**9), 10**9)
                updated = 1_700_000_000_000_000 + rng.randrange(10**12)
                after = {
                    "id": key,
                    "name": rng.choice(["Anne", "Bé", "", None, f"customer {key}"]),
                    "amount": _amount(cents),
                    "updated": updated,
                    "qty": rng.randrange(-1000, 1000),
                    "active": rng.random() < 0.5,
                }
                before = None
                rows[key] = {
                    "id": key,
                    "name": after["name"],
                    "amount_cents": cents,
                    "updated": updated,
                    "qty": after["qty"],
                    "active": after["active"],
                }
            source = {
                "version": "2.7.3.Final",
                "connector": "postgresql",
                "name": "dbserver1",
                "ts_ms": 1_750_000_000_000,
                "snapshot": "false",
                "db": "shop",
                "sequence": json.dumps([str(lsn - 1), str(lsn)]),
                "schema": "public",
                "table": table,
                "txId": lsn // 3,
                "lsn": lsn,
            }
            payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1_750_000_000_000}
            payload["transaction"] = None
            # As JsonConverter writes it: schema first, compact.
            value = '{"schema":' + schemas[topic] + ',"payload":' + json.dumps(payload, separators=(",", ":")) + "}"
            key_text = '{"schema":' + keys[topic] + ',"payload":{"id":' + str(key) + "}}"
            for text in (value, None) if op == "d" else (value,):
                offset = offsets.get((topic, partition), 0)
                offsets[(topic, partition)] = offset + 1
                record = {"topic": topic, "partition": partition, "offset": offset, "key": key_text, "value": text}
                lines.append(json.dumps(record, separators=(",", ":")))
                records += 1
        path = directory / f"part-{number:05d}.json"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.utime(path, (1_750_000_000 + number, 1_750_000_000 + number))
    return {"records": records, "model": model}


def catalog_at(root: Path, name: str) -> CatalogConfig:
    config = CatalogConfig(
        f"{name}_{uuid.uuid4().hex[:6]}", f"sqlite:///{root / (name + '.db')}", file_uri(root / name)
    )
    upgrade(config)
    return config


@dataclass
class IcesinkRun:
    seconds: float  # the whole query: start, every micro-batch, the end
    batch_seconds: list[float]  # each micro-batch as Spark times it (triggerExecution), in order
    python_workers_mib: float  # the peak resident memory of Spark's Python workers during the query
    config: CatalogConfig

    @property
    def steady_batch_seconds(self) -> float:
        """The median micro-batch after the first (which creates the tables)."""
        return statistics.median(self.batch_seconds[1:] or self.batch_seconds)


def run_icesink(
    spark: Any, source: Path, root: Path, name: str, partition_by: dict[str, list[str]] | None = None
) -> IcesinkRun:
    import icesink

    config = catalog_at(root, name)
    df = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    with PeakMemory() as peak:
        started = time.perf_counter()
        query = icesink.stream(
            df,
            tables=icesink.debezium("bench", partition_by=partition_by),
            checkpoint_location=str(root / "ckpt" / name),
            trigger={"availableNow": True},
            catalog=config,
        )
        query.awaitTermination()
        seconds = time.perf_counter() - started
    progress = sorted((p for p in query.recentProgress if p.numInputRows > 0), key=lambda p: p.batchId)
    batches = [p.durationMs["triggerExecution"] / 1000 for p in progress]
    return IcesinkRun(seconds, batches, peak.mib()["python_workers"], config)


@contextlib.contextmanager
def general_way_only() -> Iterator[None]:
    """Streams started inside route every micro-batch the general way (two jobs), as before one-job writes."""
    from icesink.sink.known_routes import KnownRoutes

    ready = KnownRoutes.ready
    KnownRoutes.ready = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        KnownRoutes.ready = ready  # type: ignore[method-assign]


def run_spark(spark: Any, source: Path, root: Path, name: str) -> float:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    events = spark.read.schema(KAFKA_SCHEMA).json(str(source)).where(F.col("value").isNotNull())
    parsed = events.select("topic", F.from_json("value", ENVELOPE_DDL).alias("e"))
    rows = parsed.select("topic", F.col("e.payload.op").alias("op"), "e.payload.after.*")
    rows.write.option("compression", "zstd").partitionBy("topic").parquet(str(root / "spark" / name))
    return time.perf_counter() - started


def check(config: CatalogConfig, model: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Every table holds exactly the model's rows (read by icesink's reader, deletes applied)."""
    import decimal

    import icesink

    for table, rows in model.items():
        if not rows:
            continue
        actual = {r["id"]: r for r in icesink.read(f"bench.{table}", catalog=config).to_pylist()}
        assert set(actual) == set(rows), f"{table}: {len(actual)} rows, expected {len(rows)}"
        for key, want in rows.items():
            have = actual[key]
            assert have["amount"] == decimal.Decimal(want["amount_cents"]).scaleb(-2), (table, key)
            assert (have["name"], have["qty"], have["active"]) == (want["name"], want["qty"], want["active"])


def data_files(config: CatalogConfig) -> int:
    """The live data files of every table of the run."""
    from icesink.catalog.loader import open_catalog

    catalog = open_catalog(config)
    total = 0
    for _, name in catalog.list_tables("bench"):
        snapshot = catalog.load_table(f"bench.{name}").current_snapshot()
        if snapshot is not None and snapshot.summary is not None:
            total += int(snapshot.summary.additional_properties.get("total-data-files", 0))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--many", type=int, default=200)
    parser.add_argument("--events", type=int, default=50_000, help="Events per micro-batch (file).")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-many", action="store_true")
    parser.add_argument(
        "--buckets", type=int, default=16, help="Then the many tables each partitioned by bucket(N, id) (0: skip)."
    )
    parser.add_argument("--no-record", action="store_true", help="Print the figures only.")
    parser.add_argument(
        "--general-too",
        action="store_true",
        help="Each round, the stream once more with every micro-batch routed the general way (two jobs).",
    )
    args = parser.parse_args()

    from bench._spark import local_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = local_spark()
    root = Path(tempfile.mkdtemp(prefix="icesink-debezium-"))
    try:
        few = write_events(root / "few", args.tables, args.batches, args.events)
        records = few["records"]
        print(f"{records} records over {args.tables} tables, {args.batches} micro-batches", flush=True)
        run_spark(spark, root / "few", root, "warm")
        run_icesink(spark, root / "few", root, "warm")
        icesink_seconds, spark_seconds = [], []
        few_runs: list[IcesinkRun] = []
        general_runs: list[IcesinkRun] = []
        for round_number in range(args.rounds):
            spark_seconds.append(run_spark(spark, root / "few", root, f"s{round_number}"))
            run = run_icesink(spark, root / "few", root, f"i{round_number}")
            check(run.config, few["model"])
            icesink_seconds.append(run.seconds)
            few_runs.append(run)
            general = None
            if args.general_too:
                with general_way_only():
                    general = run_icesink(spark, root / "few", root, f"g{round_number}")
                check(general.config, few["model"])
                general_runs.append(general)
            print(
                json.dumps(
                    {
                        "round": round_number,
                        "spark_s": spark_seconds[-1],
                        "icesink_s": run.seconds,
                        "icesink_batches_s": [round(b, 2) for b in run.batch_seconds],
                        **(
                            {
                                "general_way_s": general.seconds,
                                "general_way_batches_s": [round(b, 2) for b in general.batch_seconds],
                            }
                            if general is not None
                            else {}
                        ),
                    }
                ),
                flush=True,
            )
        report: dict[str, Any] = {
            "records": records,
            "tables": args.tables,
            "batches": args.batches,
            "spark_rows_per_second": [round(records / s) for s in spark_seconds],
            "icesink_rows_per_second": [round(records / s) for s in icesink_seconds],
            "ratio": [round(s / i, 3) for s, i in zip(spark_seconds, icesink_seconds, strict=True)],
        }
        if general_runs:
            report["general_way_ratio"] = [
                round(s / g.seconds, 3) for s, g in zip(spark_seconds, general_runs, strict=True)
            ]
            report["general_way_steady_batch_s"] = round(
                statistics.median(g.steady_batch_seconds for g in general_runs), 2
            )
            report["steady_batch_s"] = round(statistics.median(r.steady_batch_seconds for r in few_runs), 2)
        if not args.skip_many:
            many = write_events(root / "many", args.many, args.batches, args.events)
            many_runs: list[IcesinkRun] = []
            for round_number in range(args.rounds):
                run = run_icesink(spark, root / "many", root, f"m{round_number}")
                check(run.config, many["model"])
                many_runs.append(run)
                print(json.dumps({"round": round_number, f"icesink_{args.many}_tables_s": run.seconds}), flush=True)
            many_seconds = [r.seconds for r in many_runs]
            report["many_tables"] = args.many
            report["many_seconds"] = [round(s, 1) for s in many_seconds]
            report["few_seconds"] = [round(s, 1) for s in icesink_seconds]
            report["many_over_few"] = round(statistics.median(many_seconds) / statistics.median(icesink_seconds), 2)
            # A micro-batch after the first (which creates the tables), as Spark times it.
            few_batch = statistics.median(r.steady_batch_seconds for r in few_runs)
            many_batch = statistics.median(r.steady_batch_seconds for r in many_runs)
            report["few_batch_seconds"] = [[round(b, 2) for b in r.batch_seconds] for r in few_runs]
            report["many_batch_seconds"] = [[round(b, 2) for b in r.batch_seconds] for r in many_runs]
            report["many_over_few_batch"] = round(many_batch / few_batch, 2)
            report["python_workers_peak_mib"] = {
                f"{args.tables} tables": max(r.python_workers_mib for r in few_runs),
                f"{args.many} tables": max(r.python_workers_mib for r in many_runs),
            }
            if args.buckets:
                # Every table partitioned: a micro-batch writes up to tables x buckets partitions, many more than a
                # task's open-file budget; memory must stay that of one table's rows and its open files.
                buckets = {f"bench.t{t:03d}": [f"bucket({args.buckets}, id)"] for t in range(args.many)}
                run = run_icesink(spark, root / "many", root, "partitioned", partition_by=buckets)
                check(run.config, many["model"])
                label = f"{args.many} tables x {args.buckets} buckets"
                report["python_workers_peak_mib"][label] = run.python_workers_mib
                report["partitioned_batch_seconds"] = [round(b, 2) for b in run.batch_seconds]
                report["partitioned_data_files"] = data_files(run.config)
        print(json.dumps(report, indent=2))
        if not args.no_record:
            record_figures(args, report)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def record_figures(args: argparse.Namespace, report: dict[str, Any]) -> None:
    groups = [f"{args.tables} tables"]
    icesink_values: list[float | None] = [statistics.median(report["icesink_rows_per_second"])]
    spark_values: list[float | None] = [statistics.median(report["spark_rows_per_second"])]
    if "many_seconds" in report:
        groups.append(f"{args.many} tables")
        icesink_values.append(round(report["records"] / statistics.median(report["many_seconds"])))
        spark_values.append(None)
    record(
        Figures(
            benchmark="debezium_throughput",
            title=f"A Debezium stream of {report['records']:,} records, {args.batches} micro-batches",
            unit="rows/s",
            better="higher",
            groups=groups,
            series={"icesink.debezium (keyed, committed)": icesink_values, "Spark's parse-and-write": spark_values},
            command=" ".join(["bench/debezium_throughput.py", *sys.argv[1:]]),
            note=f"icesink / Spark per round: {report['ratio']}; {report.get('many_over_few')}x the time over "
            f"{args.many} tables",
        )
    )


if __name__ == "__main__":
    main()
