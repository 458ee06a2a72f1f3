"""What write-audit-publish costs a micro-batch: its checks, and moving ``main``.

Part 1, through Spark. A stream of ``--batches`` micro-batches of 1,000,000 rows each (id long, name string,
amount double, ts timestamp) goes into a new unpartitioned table with icesink's Arrow writer, alternating,
``--repeat`` times:

* ``main``: ``icesink.stream`` into ``main``, as without write-audit-publish;
* ``branch``: the same into ``branch="audit"``, nothing audited or published (the branch alone);
* ``audited``: into the branch with ``audit=[not_null("id", "name"), in_range("amount", min=0),
  matches("amount >= 0 and id >= 0"), rows_written()]``, ``main`` published after every checkpoint.

Each micro-batch is timed by Spark (its progress's ``triggerExecution``: reading, writing, staging, the inline
commit, and for ``audited`` reading back the rows the checkpoint added, the checks, and the publish); the first of
each stream (starting up) is left out. Reports the medians and ``audited`` over ``branch``: what the checks and
the publish add to the micro-batch (goal: under 10%).

Part 2, no Spark running: the audit of the last 1,000,000-row snapshot alone (reading the rows it added and the
checks), and publishing alone: ``main`` of 1, 10 and 50 tables moved in one transaction, per table (goal:
under 20 ms), on SQLite and on PostgreSQL when ``ICESINK_BENCH_PG`` names a database URL.

    .venv/bin/python bench/wap_cost.py [--rows 1000000] [--batches 5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from watermark_cost import make_input  # the same 1M-row files, one per micro-batch

SCHEMA = "id long, name string, amount double, ts timestamp, partition int"
KINDS = ("main", "branch", "audited")
BRANCH = "audit"


def checks() -> list[Any]:
    from icesink import checks as c

    return [
        c.not_null("id", "name"),
        c.in_range("amount", min=0),
        c.matches("amount >= 0 and id >= 0"),
        c.rows_written(),
    ]


def run_once(spark: Any, source: Path, config: Any, number: int, kind: str) -> list[float]:
    """The seconds of each micro-batch of one stream over every input file, one file per micro-batch."""
    import icesink

    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source)).drop("partition")
    options: dict[str, Any] = {}
    if kind != "main":
        options["branch"] = BRANCH
    if kind == "audited":
        options["audit"] = checks()
    query = icesink.stream(
        df,
        table=f"bench.events_{number}",
        checkpoint_location=str(Path(config.warehouse.removeprefix("file://")).parent / f"checkpoint-{number}"),
        trigger={"availableNow": True},
        catalog=config,
        create_table=True,
        writer="arrow",
        **options,
    )
    query.awaitTermination()
    progress = sorted(query.recentProgress, key=lambda p: p.batchId)
    return [p.durationMs["triggerExecution"] / 1000 for p in progress if p.numInputRows > 0]


def audit_alone(config: Any, identifier: str) -> dict[str, float]:
    """The audit of the branch head of a table the ``audited`` stream wrote, timed by itself (reading the rows it
    added, the columns the checks name, and the checks), as the committer audits it: against its parent."""
    from icesink.audit.auditing import audit_link
    from icesink.audit.chain import Chain, Link
    from icesink.catalog.ledger import Ledger
    from icesink.catalog.loader import open_catalog
    from icesink.iceberg.publish import BranchLine

    table = open_catalog(config).load_table(identifier)
    head = table.metadata.snapshot_by_name(BRANCH)
    assert head is not None and head.parent_snapshot_id is not None and head.summary is not None
    checkpoint = int(head.summary["icesink.max-committed-checkpoint-id"])
    link = Link(head, head.summary["icesink.job-id"], checkpoint, checkpoint, None, False, False)
    chain = Chain(identifier, BRANCH, table, BranchLine(head.parent_snapshot_id, head.snapshot_id, (head,)), (link,))
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        entry = audit_link(chain, 0, checks(), Ledger(config))
        timings.append(time.perf_counter() - started)
    return {"rows": entry.rows_checked, "passed": entry.passed, "audit_seconds": round(statistics.median(timings), 3)}


def publish_alone(config: Any, tables: int, rounds: int = 5) -> dict[str, float]:
    """``main`` of ``tables`` tables moved to their branch heads in one transaction: seconds, and ms per table."""
    import pyarrow as pa

    from icesink.audit.chain import read_chain
    from icesink.catalog.audit_record import AuditRecord
    from icesink.catalog.loader import open_catalog
    from icesink.committer.publisher import publish_moves

    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("pub")
    names = [f"pub.t{tables}_{i}" for i in range(tables)]
    schema = pa.schema([pa.field("id", pa.int64())])
    for name in names:
        table = catalog.create_table(name, schema=schema)
        table.append(pa.table({"id": [0]}, schema=schema))
        head = table.current_snapshot()
        assert head is not None
        table.manage_snapshots().create_branch(head.snapshot_id, BRANCH).commit()  # from main, as a stream does
    seconds = []
    for number in range(rounds):
        moves = []
        for name in names:
            table = catalog.load_table(name)
            table.append(pa.table({"id": [number + 1]}, schema=schema), branch=BRANCH)
            table = catalog.load_table(name)
            chain = read_chain(table, name, BRANCH, AuditRecord(config))
            moves.append((chain, chain.links[-1]))
        started = time.perf_counter()
        publish_moves(catalog, config, moves, "bench")
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    return {"tables": tables, "seconds": round(median, 4), "ms_per_table": round(median * 1000 / tables, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from _spark import local_spark

    from icesink.catalog import database
    from icesink.catalog.config import CatalogConfig

    root = Path(tempfile.mkdtemp(prefix="icesink-wap-"))
    config = CatalogConfig("bench", f"sqlite:///{root / 'catalog.db'}", (root / "warehouse").as_uri())
    try:
        make_input(root / "input", args.rows * args.batches, args.batches)
        database.upgrade(config)
        spark = local_spark()
        run_once(spark, root / "input", config, 0, "audited")  # warm-up: the JVM and the Python workers
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        last_audited = 0
        number = 0
        for attempt in range(args.repeat):
            for kind in KINDS if attempt % 2 == 0 else KINDS[::-1]:
                number += 1
                times[kind] += run_once(spark, root / "input", config, number, kind)[1:]
                if kind == "audited":
                    last_audited = number
        spark.stop()
        medians = {kind: statistics.median(values) for kind, values in times.items()}
        print(json.dumps({"seconds": times}), file=sys.stderr)  # kept if part 2 fails
        publishing = {"sqlite": [publish_alone(config, n) for n in (1, 10, 50)]}
        pg = os.environ.get("ICESINK_BENCH_PG")
        if pg:
            pg_config = CatalogConfig("bench", pg, (root / "pg-warehouse").as_uri())
            database.upgrade(pg_config)
            publishing["postgresql"] = [publish_alone(pg_config, n) for n in (1, 10, 50)]
        result = {
            "rows_per_batch": args.rows,
            "batches": args.batches,
            "repeat": args.repeat,
            "seconds": {kind: [round(v, 3) for v in values] for kind, values in times.items()},
            "median_seconds": {kind: round(v, 3) for kind, v in medians.items()},
            "audited_over_branch": round(medians["audited"] / medians["branch"], 4),
            "branch_over_main": round(medians["branch"] / medians["main"], 4),
            "audit_of_one_batch": audit_alone(config, f"bench.events_{last_audited}"),
            "publish": publishing,
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
