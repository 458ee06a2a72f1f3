"""Append throughput: icesink.stream end to end (write + commit) vs Spark's own df.write.parquet.

Both read the same Parquet input (default 2,000,000 rows: id long, name string,
amount double, ts timestamp) in the same Spark session and write zstd Parquet
to local disk; runs alternate, and the median of each is reported with the
ratio icesink / Spark. icesink runs twice per round: with its default writer
(Spark's Parquet writer for this unpartitioned local table) and with
``writer="arrow"`` (icesink's Arrow writer in Python workers, what partitioned
tables and object stores use). Spark's own streaming Parquet sink (same
trigger, same input) runs alongside, as the streaming peer. Peak RSS of the
driver's Python, the JVM and Spark's Python workers is sampled during the
icesink runs.

    .venv/bin/python bench/append_throughput.py [--rows 2000000] [--repeat 3] [--batches 1] [--s3]

With ``--native`` the same stream is also written through ``df.writeStream.format("icesink")``
(pyspark's Python data source sink: appends through the Arrow writer).

With ``--nested`` it measures nested input instead: rows of a struct of 4 fields and
a list of 8 longs, written by icesink (the Arrow writer: Spark cannot give list
elements Iceberg field ids) and by Spark's ``df.write.parquet``, next to the same
values as 12 flat columns written by icesink (its default writer for flat data)
and by Spark; the report gives icesink nested / Spark nested and icesink nested /
icesink flat (the same bytes, so the cost of nesting itself).

With ``--s3`` icesink also writes the same stream into a bucket on moto's S3
server on 127.0.0.1 (the Arrow writer: Spark has no S3 connector here), and the
report adds its ratio to icesink's local-disk throughput with the same writer.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))

from _memory import PeakMemory
from figures import record_values

SCHEMA = "id long, name string, amount double, ts timestamp"
NESTED_SCHEMA = "id long, event struct<name: string, amount: double, ts: timestamp, kind: int>, scores array<bigint>"
FLAT_SCHEMA = "id long, name string, amount double, ts timestamp, kind int, " + ", ".join(
    f"s{i} bigint" for i in range(8)
)


def make_nested_input(nested: Path, flat: Path, rows: int, files: int) -> None:
    """The same values twice: a struct of 4 fields and a list of 8 longs per row, and as 12 flat columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    nested.mkdir(parents=True)
    flat.mkdir(parents=True)
    per_file = rows // files
    start = int(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp() * 1_000_000)
    rng = np.random.default_rng(7)
    for number in range(files):
        ids = np.arange(number * per_file, (number + 1) * per_file, dtype=np.int64)
        name = pa.array([f"customer-{i % 100_003:06d}" for i in ids.tolist()])
        amount = pa.array(rng.uniform(0, 1000, per_file))
        ts = pa.array(start + ids * 1_000_000, pa.timestamp("us", tz="UTC"))
        kind = pa.array((ids % 7).astype(np.int32))
        scores = rng.integers(0, 1_000_000, size=(per_file, 8), dtype=np.int64)
        offsets = pa.array(np.arange(0, per_file * 8 + 1, 8, dtype=np.int32))
        event = pa.StructArray.from_arrays([name, amount, ts, kind], names=["name", "amount", "ts", "kind"])
        lists = pa.ListArray.from_arrays(offsets, pa.array(scores.reshape(-1)))
        pq.write_table(
            pa.table({"id": ids, "event": event, "scores": lists}),
            nested / f"part-{number:03d}.parquet",
            compression="zstd",
        )
        columns = {"id": ids, "name": name, "amount": amount, "ts": ts, "kind": kind}
        columns |= {f"s{i}": pc.cast(pa.array(scores[:, i]), pa.int64()) for i in range(8)}
        pq.write_table(pa.table(columns), flat / f"part-{number:03d}.parquet", compression="zstd")


def make_input(directory: Path, rows: int, files: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    per_file = rows // files
    start = int(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp() * 1_000_000)
    rng = np.random.default_rng(7)
    for number in range(files):
        ids = np.arange(number * per_file, (number + 1) * per_file, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "name": pa.array([f"customer-{i % 100_003:06d}" for i in ids.tolist()]),
                "amount": rng.uniform(0, 1000, per_file),
                "ts": pa.array(start + ids * 1_000_000, pa.timestamp("us", tz="UTC")),
            }
        )
        pq.write_table(table, directory / f"part-{number:03d}.parquet", compression="zstd")


def spark_write(spark, source: Path, target: Path, schema: str = SCHEMA) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    spark.read.schema(schema).parquet(str(source)).write.option("compression", "zstd").parquet(str(target))
    return time.perf_counter() - started


def spark_stream_write(spark, source: Path, target: Path, checkpoint: Path, files_per_batch: int) -> float:  # type: ignore[no-untyped-def]
    """Spark's own streaming Parquet sink (exactly once through its _spark_metadata log), same trigger."""
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_batch).parquet(str(source))
    started = time.perf_counter()
    query = (
        df.writeStream.format("parquet")
        .option("compression", "zstd")
        .option("path", str(target))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def local_catalog(work: Path):  # type: ignore[no-untyped-def]
    from icesink.catalog.config import CatalogConfig
    from icesink.paths import file_uri

    return CatalogConfig("bench", f"sqlite:///{work / 'catalog.db'}", file_uri(work / "warehouse"), embedded=True)


def s3_catalog(work: Path, endpoint: str):  # type: ignore[no-untyped-def]
    """A bucket on moto's S3 server on loopback; the catalog database stays local SQLite."""
    import pyarrow.fs as pafs

    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.database import upgrade

    properties = {
        "s3.endpoint": endpoint,
        "s3.access-key-id": "bench",
        "s3.secret-access-key": "bench-secret",
        "s3.region": "us-east-1",
    }
    s3 = pafs.S3FileSystem(
        access_key="bench",
        secret_key="bench-secret",
        region="us-east-1",
        scheme="http",
        endpoint_override=endpoint.removeprefix("http://"),
        allow_bucket_creation=True,
    )
    s3.create_dir("bench")
    config = CatalogConfig("bench", f"sqlite:///{work / 's3-catalog.db'}", "s3://bench/warehouse", properties)
    upgrade(config)
    return config


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 in its own process."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def icesink_write(
    spark, source: Path, work: Path, run: str, files_per_batch: int, config, writer: str, schema: str = SCHEMA
) -> float:  # type: ignore[no-untyped-def]
    import icesink

    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_batch).parquet(str(source))
    started = time.perf_counter()
    query = icesink.stream(
        df,
        table=f"bench.append_{run}",
        checkpoint_location=str(work / f"ckpt-{run}-{config.warehouse.split(':')[0]}"),
        trigger={"availableNow": True},
        create_table=True,
        catalog=config,
        writer=writer,
    )
    query.awaitTermination()
    return time.perf_counter() - started


def native_write(spark, source: Path, work: Path, run: str, files_per_batch: int, config) -> float:  # type: ignore[no-untyped-def]
    """``df.writeStream.format("icesink")``: pyspark's Python data source sink (appends, the Arrow writer)."""
    import icesink
    from icesink.catalog.loader import open_catalog
    from icesink.sink.tables import schema_from_spark

    name = f"bench.native_{run}"
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_batch).parquet(str(source))
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("bench")
    catalog.create_table(name, schema=schema_from_spark(df.schema, name))
    icesink.register(spark)
    started = time.perf_counter()
    query = (
        df.writeStream.format("icesink")
        .option("table", name)
        .option("job_id", f"native-{run}")
        .option("catalog", config.name)
        .option("catalog.uri", config.uri)
        .option("catalog.warehouse", config.warehouse)
        .option("checkpointLocation", str(work / f"ckpt-native-{run}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--batches", type=int, default=1, help="micro-batches the input is split into")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], help="extra Spark setting KEY=VALUE (repeatable)")
    parser.add_argument("--s3", action="store_true", help="also write to moto's S3 server on loopback")
    parser.add_argument("--native", action="store_true", help='also writeStream.format("icesink")')
    parser.add_argument("--nested", action="store_true", help="nested input against the same values flat")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server()) if args.s3 else None
        run_benchmark(args, endpoint)


def run_benchmark(args: argparse.Namespace, endpoint: str | None) -> None:

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for setting in args.conf:
        key, _, value = setting.partition("=")
        spark = spark.config(key, value)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="icesink-bench-"))
    if args.nested:
        try:
            run_nested(spark, args, work)
        finally:
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        make_input(work / "input", args.rows, args.files)
        files_per_batch = max(1, args.files // args.batches)
        local = local_catalog(work)
        s3 = s3_catalog(work, endpoint) if endpoint else None
        # Warm up every path once (JIT, Python worker start-up) before measuring.
        spark_write(spark, work / "input", work / "warm-spark")
        for writer in ("auto", "arrow"):
            icesink_write(spark, work / "input", work, f"warm_{writer}", files_per_batch, local, writer)
        if s3 is not None:
            icesink_write(spark, work / "input", work, "warm_s3", files_per_batch, s3, "auto")
        spark_stream_write(spark, work / "input", work / "warm-stream", work / "warm-stream-ckpt", files_per_batch)
        if args.native:
            native_write(spark, work / "input", work, "warm", files_per_batch, local)
        spark_times, stream_times, icesink_times, arrow_times, s3_times, native_times = [], [], [], [], [], []
        with PeakMemory() as memory:
            for run in range(args.repeat):
                spark_times.append(spark_write(spark, work / "input", work / f"spark-{run}"))
                stream_times.append(
                    spark_stream_write(
                        spark, work / "input", work / f"stream-{run}", work / f"stream-ckpt-{run}", files_per_batch
                    )
                )
                icesink_times.append(
                    icesink_write(spark, work / "input", work, str(run), files_per_batch, local, "auto")
                )
                arrow_times.append(
                    icesink_write(spark, work / "input", work, f"arrow_{run}", files_per_batch, local, "arrow")
                )
                if args.native:
                    native_times.append(native_write(spark, work / "input", work, str(run), files_per_batch, local))
                if s3 is not None:
                    s3_times.append(
                        icesink_write(spark, work / "input", work, f"s3_{run}", files_per_batch, s3, "auto")
                    )
        spark_rate = args.rows / statistics.median(spark_times)
        stream_rate = args.rows / statistics.median(stream_times)
        icesink_rate = args.rows / statistics.median(icesink_times)
        arrow_rate = args.rows / statistics.median(arrow_times)
        s3_report = {}
        if s3_times:
            s3_rate = args.rows / statistics.median(s3_times)
            s3_report = {
                "icesink_s3_rows_per_s": round(s3_rate),
                "ratio_s3_to_local_disk_arrow_writer": round(s3_rate / arrow_rate, 3),
                "icesink_s3_seconds": [round(t, 2) for t in s3_times],
            }
        native_report = {}
        if native_times:
            native_rate = args.rows / statistics.median(native_times)
            native_report = {
                "icesink_native_sink_rows_per_s": round(native_rate),
                "ratio_native_sink_to_icesink_stream": round(native_rate / icesink_rate, 3),
                "ratio_native_sink_to_arrow_writer": round(native_rate / arrow_rate, 3),
                "icesink_native_sink_seconds": [round(t, 2) for t in native_times],
            }
        report = {
            "rows": args.rows,
            "micro_batches": args.batches,
            "master": args.master,
            "conf": args.conf,
            "spark_parquet_rows_per_s": round(spark_rate),
            "spark_streaming_sink_rows_per_s": round(stream_rate),
            "icesink_rows_per_s": round(icesink_rate),
            "ratio_icesink_to_spark": round(icesink_rate / spark_rate, 3),
            "ratio_icesink_to_spark_streaming_sink": round(icesink_rate / stream_rate, 3),
            "icesink_arrow_writer_rows_per_s": round(arrow_rate),
            "ratio_icesink_arrow_writer_to_spark": round(arrow_rate / spark_rate, 3),
            "spark_seconds": [round(t, 2) for t in spark_times],
            "spark_streaming_sink_seconds": [round(t, 2) for t in stream_times],
            "icesink_seconds": [round(t, 2) for t in icesink_times],
            "icesink_arrow_writer_seconds": [round(t, 2) for t in arrow_times],
            "peak_rss_mib": memory.mib(),
            **s3_report,
            **native_report,
        }
        print(json.dumps(report, indent=2))
        record_figures(args, report)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def record_figures(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The run's medians into bench/results/append_throughput.json, whose groups are --rows ("2,000,000 rows").

    Only runs as the chart describes them are recorded: 8 input files (not the default 4), one micro-batch,
    local[2], no extra settings, and neither --s3 nor --native (whose runs alternate with the others').
    """
    chart = args.files == 8 and args.batches == 1 and args.master == "local[2]" and not args.conf
    if not chart or args.s3 or args.native:
        print(
            "append_throughput: not recorded: the chart is of --files 8, one batch, local[2], no other options",
            file=sys.stderr,
        )
        return
    group = f"{args.rows:,} rows"
    record_values(
        "append_throughput",
        {
            "icesink.stream": {group: report["icesink_rows_per_s"]},
            "Spark df.write.parquet": {group: report["spark_parquet_rows_per_s"]},
            "Spark streaming Parquet sink": {group: report["spark_streaming_sink_rows_per_s"]},
        },
        " ".join(["bench/append_throughput.py", *sys.argv[1:]]),
    )


def run_nested(spark, args: argparse.Namespace, work: Path) -> None:  # type: ignore[no-untyped-def]
    """Nested rows against the same values flat, each written by icesink and by Spark, runs alternating."""
    nested, flat = work / "nested-input", work / "flat-input"
    make_nested_input(nested, flat, args.rows, args.files)
    files_per_batch = max(1, args.files // args.batches)
    local = local_catalog(work)

    def one_round(label: str) -> dict[str, float]:
        return {
            "spark_nested": spark_write(spark, nested, work / f"spark-nested-{label}", NESTED_SCHEMA),
            "icesink_nested": icesink_write(
                spark, nested, work, f"nested_{label}", files_per_batch, local, "auto", NESTED_SCHEMA
            ),
            "spark_flat": spark_write(spark, flat, work / f"spark-flat-{label}", FLAT_SCHEMA),
            "icesink_flat": icesink_write(
                spark, flat, work, f"flat_{label}", files_per_batch, local, "auto", FLAT_SCHEMA
            ),
        }

    one_round("warm")
    rounds = [one_round(str(run)) for run in range(args.repeat)]
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    rate = {key: args.rows / seconds for key, seconds in median.items()}
    input_bytes = {
        name: sum(f.stat().st_size for f in directory.glob("*.parquet"))
        for name, directory in (("nested", nested), ("flat", flat))
    }
    report = {
        "rows": args.rows,
        "input_bytes": input_bytes,
        **{f"{key}_rows_per_s": round(value) for key, value in rate.items()},
        "ratio_icesink_nested_to_spark_nested": round(rate["icesink_nested"] / rate["spark_nested"], 3),
        "ratio_icesink_nested_to_icesink_flat": round(rate["icesink_nested"] / rate["icesink_flat"], 3),
        "ratio_icesink_flat_to_spark_flat": round(rate["icesink_flat"] / rate["spark_flat"], 3),
        "seconds": {key: [round(r[key], 2) for r in rounds] for key in rounds[0]},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
