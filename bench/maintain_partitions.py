"""How a maintenance pass grows with the partitions it touches (no Spark).

A keyed table partitioned by ``bucket(P, id)`` receives ``--checkpoints`` checkpoints of inserts, each writing a
small file into every partition, through the executors' task writer and the committer. Then one maintenance
pass (``icesink maintain --all``, in this process) compacts each partition's small files into one: P groups.
Timed twice on identical copies of the table (the same metadata file, registered again under another name):

* as icesink commits a pass: at most ``icesink.maintain.max-commits`` (10) snapshots;
* one commit per group (``max-commits`` set to the number of groups), as every release before did: each commit
  rewrites the manifests listing every partition and checks every commit of the pass before it.

Reported: the seconds of each, per P, and the seconds per partition. The compacted table is read back with
pyiceberg's own reader and must hold every row. The per-group run is skipped above ``--per-group-up-to``
partitions (it grows with their square).

    .venv/bin/python bench/maintain_partitions.py [--partitions 30,100,300,1000] [--checkpoints 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import upgrade
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.maintainer import Maintainer
from icesink.committer.staging import stage_checkpoint
from icesink.iceberg.describe import writer_spec
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceRequest
from icesink.paths import file_uri
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter

ROWS_PER_PARTITION = 20  # per checkpoint


def fill(config: CatalogConfig, name: str, partitions: int, checkpoints: int) -> int:
    """The table, with ``checkpoints`` small files in each partition; returns its row count."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType()),
        identifier_field_ids=[1],
    )
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("bench")
    catalog.create_table(
        name, schema, partition_spec=PartitionSpec(PartitionField(1, 1000, BucketTransform(partitions), "id_bucket"))
    )
    rows = partitions * ROWS_PER_PARTITION
    for checkpoint in range(checkpoints):
        table = catalog.load_table(name)
        spec = writer_spec(table, name, "bench", ChangeSpec(equality_field_ids=(1,), op_column="op"))
        writer = TaskWriter(spec.for_checkpoint(checkpoint), 0, 0)
        keys = pa.array(range(checkpoint * rows, (checkpoint + 1) * rows), pa.int64())
        writer.write(
            pa.table(
                {
                    "id": keys,
                    "v": pa.array([f"c{checkpoint}"] * rows),
                    "op": pa.array(["I"] * rows),
                    "__icesink_order": keys,
                }
            )
        )
        stage_checkpoint(Ledger(config), table, name, "bench", checkpoint, [writer.complete()])
        TableCommitter.of(config).commit_pending(name)
    return rows * checkpoints


def copy_of(config: CatalogConfig, name: str, copy: str) -> None:
    catalog = open_catalog(config)
    catalog.register_table(copy, catalog.load_table(name).metadata_location)


def maintain(config: CatalogConfig, name: str, max_commits: int | None) -> dict[str, Any]:
    catalog = open_catalog(config)
    table = catalog.load_table(name)
    policy = MaintenancePolicy.of(table.properties, name)
    if max_commits is not None:
        policy = MaintenancePolicy(**{**policy.__dict__, "max_commits": max_commits})
    started = time.perf_counter()
    report = Maintainer(catalog, config).run(table, name, MaintenanceRequest(policy, everything=True))
    seconds = time.perf_counter() - started
    compaction = report.compaction
    assert compaction is not None and not compaction.groups_failed, report
    return {"seconds": seconds, "groups": compaction.groups_committed, "commits": len(compaction.snapshot_ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="30,100,300,1000")
    parser.add_argument("--checkpoints", type=int, default=3)
    parser.add_argument("--per-group-up-to", type=int, default=300)
    args = parser.parse_args()
    results = []
    for partitions in (int(p) for p in args.partitions.split(",")):
        root = Path(tempfile.mkdtemp(prefix="icesink-maintain-partitions-"))
        try:
            config = CatalogConfig(name="bench", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=file_uri(root))
            upgrade(config)
            rows = fill(config, "bench.t", partitions, args.checkpoints)
            copy_of(config, "bench.t", "bench.per_group")
            run = {"partitions": partitions, "rows": rows, "batched": maintain(config, "bench.t", None)}
            if partitions <= args.per_group_up_to:
                run["per_group"] = maintain(config, "bench.per_group", partitions)
            read = open_catalog(config).load_table("bench.t").scan().to_arrow()
            assert read.num_rows == rows and len(set(read.column("id").to_pylist())) == rows
        finally:
            shutil.rmtree(root, ignore_errors=True)
        results.append(run)
        line = f"{partitions:5d} partitions: {run['batched']['seconds']:6.2f} s in {run['batched']['commits']} commits"
        line += f" ({1000 * run['batched']['seconds'] / partitions:.1f} ms a partition)"
        if "per_group" in run:
            line += f"; a commit per group: {run['per_group']['seconds']:6.2f} s"
        print(line, flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
