"""Group commits of keyed checkpoints into many tables, checkpoint after checkpoint (no Spark).

``--tables`` keyed tables (a long key, text, a decimal, a timestamp, an int, a boolean), optionally each
partitioned by ``bucket(--buckets, id)``. Every checkpoint writes ``--changes`` changes spread over the tables
(60% new keys, the rest updates and deletes of keys written before, as the Debezium benchmark's generator
makes them) with the executors' task writer, stages them, and commits them across every table in one
transaction, as a stream's inline committer does. Reported: seconds per staging and per group commit, in
order: what converting each checkpoint's equality deletes costs as the tables gain files, and what staging a
checkpoint of every table costs. ``--store S3`` puts the tables in moto's S3 server on 127.0.0.1 (real HTTP
requests, none of an object store's latency). Every table is then read back with pyiceberg's own reader and
checked against the changes. ``--latency-ms`` holds every request to it back by that long (a relay on loopback,
``bench/_latency.py``), as an object store's round trip would. ``--alternate``: every other checkpoint commits its
tables one after another instead of side by side (``icesink.side_by_side``, for tables on an object store), and
the two are reported apart: the same history, in the same run.

    .venv/bin/python bench/keyed_commits.py [--tables 200] [--checkpoints 6] [--changes 50000] [--buckets 0]
                                            [--store local|S3] [--latency-ms 0] [--alternate]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import decimal
import json
import random
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

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import upgrade
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.staging import TableResults, stage_tables
from icesink.iceberg.describe import writer_spec
from icesink.paths import file_uri
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter

OPS = (("c", "insert"), ("u", "update"), ("d", "delete"))
UTC_DAY = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def create_tables(config: CatalogConfig, count: int, buckets: int) -> list[str]:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import (
        BooleanType,
        DecimalType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType()),
        NestedField(3, "amount", DecimalType(12, 2)),
        NestedField(4, "updated", TimestamptzType()),
        NestedField(5, "n", IntegerType()),
        NestedField(6, "flag", BooleanType()),
        identifier_field_ids=[1],
    )
    spec = (
        PartitionSpec(PartitionField(1, 1000, BucketTransform(buckets), "id_bucket"))
        if buckets
        else UNPARTITIONED_PARTITION_SPEC
    )
    catalog = open_catalog(config)
    catalog.create_namespace("bench")
    names = [f"bench.t{t:03d}" for t in range(count)]
    for name in names:
        catalog.create_table(name, schema=schema, partition_spec=spec)
    return names


def changes_of(rng: random.Random, next_key: list[int], model: dict[int, str], size: int) -> pa.Table:
    """``size`` changes of one table; ``model`` (key -> name) follows them (the last change of a key wins)."""
    keys, ops, names = [], [], []
    for number in range(size):
        if next_key[0] < 50 or rng.random() < 0.6:
            key, op = next_key[0], "c"
            next_key[0] += 1
        else:
            key = rng.randrange(1, next_key[0])
            op = "u" if rng.random() < 0.75 else "d"
        name = f"name {key} {number}"
        keys.append(key)
        ops.append(op)
        names.append(name)
        if op == "d":
            model.pop(key, None)
        else:
            model[key] = name
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "name": names,
            "amount": pa.array([decimal.Decimal(k) / 100 for k in keys], pa.decimal128(12, 2)),
            "updated": pa.array([UTC_DAY] * len(keys), pa.timestamp("us", "UTC")),
            "n": pa.array(keys, pa.int32()),
            "flag": [k % 2 == 0 for k in keys],
            "op": ops,
            "__icesink_order": pa.array(range(len(keys)), pa.int64()),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, default=6)
    parser.add_argument("--changes", type=int, default=50_000, help="Changes per checkpoint, over all tables.")
    parser.add_argument("--buckets", type=int, default=0, help="Partition every table by bucket(N, id) (0: not).")
    parser.add_argument("--store", choices=("local", "S3"), default="local")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="Each S3 request held back this long.")
    parser.add_argument("--alternate", action="store_true", help="Every other checkpoint one table after another.")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="icesink-keyed-"))
    server = relay = None
    try:
        if args.store == "S3":
            from bench._latency import delayed_endpoint
            from bench.committer_restart import moto_server, s3_config

            server, endpoint = moto_server(root)
            if args.latency_ms:
                relay, endpoint = delayed_endpoint(endpoint, args.latency_ms / 1000)
            config = s3_config(root, endpoint)
        else:
            config = CatalogConfig(f"c_{uuid.uuid4().hex[:6]}", f"sqlite:///{root / 'c.db'}", file_uri(root / "wh"))
        upgrade(config)
        names = create_tables(config, args.tables, args.buckets)
        rng = random.Random(7)
        next_keys = {n: [1] for n in names}
        models: dict[str, dict[int, str]] = {n: {} for n in names}
        committer, ledger, catalog = TableCommitter.of(config), Ledger(config), open_catalog(config)
        seconds: list[float] = []
        staging: list[float] = []
        for checkpoint in range(args.checkpoints):
            written = []
            for name in names:
                rows = changes_of(rng, next_keys[name], models[name], args.changes // args.tables)
                table = catalog.load_table(name)
                spec = writer_spec(
                    table, name, "job", ChangeSpec(equality_field_ids=(1,), op_column="op", op_kinds=OPS)
                )
                writer = TaskWriter(spec.for_checkpoint(checkpoint), 0, 0)
                writer.write(rows)
                written.append(TableResults(table, name, [writer.complete()]))
            started = time.perf_counter()
            assert stage_tables(ledger, "job", checkpoint, written, atomic=True)
            staging.append(round(time.perf_counter() - started, 3))
            one_after_another = args.alternate and checkpoint % 2 == 1
            with side_by_side_off() if one_after_another else contextlib.nullcontext():
                started = time.perf_counter()
                committer.commit_atomic("job")
                seconds.append(round(time.perf_counter() - started, 3))
            way = "one after another" if one_after_another else "side by side"
            print(json.dumps({"checkpoint": checkpoint, "stage_s": staging[-1], "commit_s": seconds[-1], "way": way}))
        check(config, models)
        report: dict[str, Any] = {**vars(args), "stage_seconds": staging, "commit_seconds": seconds}
        if args.alternate:  # the first two (tables still small) left out of the medians
            report["side_by_side_median_s"] = statistics.median(seconds[2::2])
            report["one_after_another_median_s"] = statistics.median(seconds[3::2])
        print(json.dumps(report, indent=2))
    finally:
        for process in (relay, server):
            if process is not None:
                process.kill()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def side_by_side_off() -> Iterator[None]:
    """Commits inside work on their tables one after another, as on a local disk."""
    import icesink.committer.group as group
    import icesink.iceberg.catalog_commit as catalog_commit

    modules = (group, catalog_commit)
    real = [m.side_by_side for m in modules]
    for module in modules:
        module.side_by_side = lambda tables, catalog: False  # type: ignore[assignment]
    try:
        yield
    finally:
        for module, function in zip(modules, real, strict=True):
            module.side_by_side = function  # type: ignore[assignment]


def check(config: CatalogConfig, models: dict[str, dict[int, str]]) -> None:
    """Every table holds each key's last row, deletes applied (read by pyiceberg)."""
    catalog = open_catalog(config)
    for name, model in models.items():
        rows = catalog.load_table(name).scan(selected_fields=("id", "name")).to_arrow().to_pylist()
        found = {r["id"]: r["name"] for r in rows}
        assert len(found) == len(rows), f"{name}: a key twice"
        assert found == model, f"{name}: {len(found)} rows, expected {len(model)}"


if __name__ == "__main__":
    main()
