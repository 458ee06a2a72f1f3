"""Commit latency: icesink's committer vs pyiceberg's own fast_append, as history grows.

Two tables in the same catalog get the same small Parquet files, one file per
commit. Table ``bench.icesink`` gets them the icesink way: the checkpoint is
staged (delta manifest + ledger row, not timed, that is the writer's part)
and ``TableCommitter.commit_pending`` is timed: ledger read, marker check,
manifests, manifest list, catalog compare-and-swap, ledger update, cleanup.
Table ``bench.pyiceberg`` gets ``table.transaction().update_snapshot().fast_append()``
with the same ``DataFile`` entries, on a table object kept between commits
(pyiceberg's cheapest path). Latencies are sampled after 10 and after 2,000
prior commits; the history in between is built untimed.

Then one committer drains 10 tables, one checkpoint per table per round, and
the sustained commits per second are reported.

    .venv/bin/python bench/commit_latency.py [--history 10,2000] [--samples 50] [--tables 10] [--catalog-uri URI]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from figures import record_values

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import upgrade
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.staging import stage_checkpoint
from icesink.iceberg.describe import writer_spec
from icesink.iceberg.manifests import to_data_file
from icesink.iceberg.snapshots import commit_prepared, prepare_snapshot
from icesink.results import FileRecord, WriteResult
from icesink.writer.task import TaskWriter

JOB = "bench-job"
# `icesink committer run --expire-snapshots` on a table that keeps its newest 100 snapshots (and any
# younger than a second: at bench speed that is fewer than 100).
RETENTION = {"history.expire.max-snapshot-age-ms": "1000", "history.expire.min-snapshots-to-keep": "100"}
ROWS = pa.table({"id": pa.array(range(100), pa.int64()), "name": pa.array([f"n{i}" for i in range(100)])})


def create_table(catalog: Any, identifier: str) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog.create_namespace_if_not_exists("bench")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType()))
    return catalog.create_table(identifier, schema=schema)


class FileSource:
    """Distinct copies of one small Parquet file, as an executor would have written them."""

    def __init__(self, table: Any, identifier: str) -> None:
        writer = TaskWriter(writer_spec(table, identifier, JOB).for_checkpoint(0), task_id=0, attempt=0)
        writer.write(ROWS)
        (self._template,) = writer.complete().data_files
        self._count = 0

    def next(self) -> FileRecord:
        self._count += 1
        source = self._template.path.removeprefix("file://")
        target = source.replace(".parquet", f"-copy{self._count}.parquet")
        shutil.copyfile(source, target)
        return dataclasses.replace(self._template, path=f"file://{target}")


class IcesinkCommits:
    def __init__(self, config: CatalogConfig, catalog: Any, identifier: str, expire: bool = False) -> None:
        self._config = config
        self._catalog = catalog
        self._identifier = identifier
        self._ledger = Ledger(config)
        self._committer = TableCommitter(catalog, config, self._ledger, expire_snapshots=expire)
        if expire:
            with catalog.load_table(identifier).transaction() as transaction:
                transaction.set_properties(RETENTION)
        self._files = FileSource(catalog.load_table(identifier), identifier)
        self.commits = 0

    def stage(self) -> None:
        table = self._catalog.load_table(self._identifier)
        result = WriteResult(self.commits, 0, 0, data_files=(self._files.next(),))
        stage_checkpoint(self._ledger, table, self._identifier, JOB, self.commits, [result])

    def fill(self) -> None:
        self.commit()

    def commit(self) -> float:
        self.stage()
        started = time.perf_counter()
        (outcome,) = self._committer.commit_pending(self._identifier)
        elapsed = time.perf_counter() - started
        assert outcome.checkpoint_ids == (self.commits,) and outcome.snapshot_id is not None
        self.commits += 1
        return elapsed


class PyicebergCommits:
    def __init__(self, catalog: Any, identifier: str) -> None:
        self._table = catalog.load_table(identifier)
        # pyiceberg's fast_append never merges manifests; the history built below has the same shape.
        with self._table.transaction() as transaction:
            transaction.set_properties({"commit.manifest-merge.enabled": "false"})
        self._files = FileSource(self._table, identifier)
        self.commits = 0

    def fill(self) -> None:
        """One untimed commit of the same shape as fast_append's (one new manifest, the old ones kept).

        fast_append's own cost grows with history (about 0.3 s a commit after
        500), so building 2,000 commits with it would take most of an hour.
        """
        data_file = to_data_file(self._files.next(), self._table.metadata.format_version)
        prepared = prepare_snapshot(self._table, [data_file], {})
        self._table = commit_prepared(self._table, prepared)
        self.commits += 1

    def commit(self) -> float:
        data_file = to_data_file(self._files.next(), self._table.metadata.format_version)
        started = time.perf_counter()
        with self._table.transaction() as transaction, transaction.update_snapshot().fast_append() as append:
            append.append_data_file(data_file)
        elapsed = time.perf_counter() - started
        self.commits += 1
        return elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency_at_histories(config: CatalogConfig, histories: list[int], samples: int) -> list[dict[str, Any]]:
    catalog = open_catalog(config)
    for name in ("icesink", "icesink_expiring", "pyiceberg"):
        create_table(catalog, f"bench.{name}")
    runners: dict[str, IcesinkCommits | PyicebergCommits] = {
        "icesink": IcesinkCommits(config, catalog, "bench.icesink"),
        "icesink_expiring": IcesinkCommits(config, catalog, "bench.icesink_expiring", expire=True),
        "pyiceberg": PyicebergCommits(catalog, "bench.pyiceberg"),
    }
    rows = []
    for history in histories:
        measured: dict[str, list[float]] = {}
        for runner in runners.values():
            while runner.commits < history:  # untimed history
                runner.fill()
        # Interleave the timed commits so that both see the same machine noise.
        for _ in range(samples):
            for name, runner in runners.items():
                measured.setdefault(name, []).append(runner.commit())
        row: dict[str, Any] = {"history": history}
        for name, values in measured.items():
            row[f"{name}_p50_ms"] = round(statistics.median(values) * 1000, 1)
            row[f"{name}_p99_ms"] = round(percentile(values, 0.99) * 1000, 1)
        row["ratio_p50"] = round(row["icesink_p50_ms"] / row["pyiceberg_p50_ms"], 2)
        row["icesink_expiring_snapshots"] = len(catalog.load_table("bench.icesink_expiring").metadata.snapshots)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def commits_per_second(config: CatalogConfig, tables: int, rounds: int) -> dict[str, Any]:
    catalog = open_catalog(config)
    runners = []
    for number in range(tables):
        identifier = f"bench.many_{number}"
        create_table(catalog, identifier)
        runners.append(IcesinkCommits(config, catalog, identifier))
    committer = TableCommitter(catalog, config, Ledger(config))
    ledger = Ledger(config)
    busy = 0.0
    commits = 0
    for _ in range(rounds):
        for runner in runners:
            runner.stage()
            runner.commits += 1
        started = time.perf_counter()
        for identifier in ledger.tables_with_pending():  # what one daemon pass does
            commits += len(committer.commit_pending(identifier))
        busy += time.perf_counter() - started
    assert commits == tables * rounds
    return {"tables": tables, "commits": commits, "commits_per_second": round(commits / busy, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", default="10,2000", help="prior commits at which latency is sampled")
    parser.add_argument("--samples", type=int, default=50, help="timed commits per history point and writer")
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20, help="checkpoints per table in the many-tables run")
    parser.add_argument("--catalog-uri", help="SQLAlchemy URI; default: SQLite in a temporary directory")
    args = parser.parse_args()
    histories = [int(h) for h in args.history.split(",")]

    with tempfile.TemporaryDirectory(prefix="icesink-commit-bench-") as tmp:
        uri = args.catalog_uri or f"sqlite:///{tmp}/catalog.db"
        config = CatalogConfig.resolve(name="bench", uri=uri, warehouse=f"file://{tmp}/warehouse")
        upgrade(config)
        rows = latency_at_histories(config, histories, args.samples)
        first, last = rows[0], rows[-1]
        growth = {
            f"{name}_growth_p50": round(last[f"{name}_p50_ms"] / first[f"{name}_p50_ms"], 2)
            for name in ("icesink", "icesink_expiring", "pyiceberg")
        }
        throughput = commits_per_second(config, args.tables, args.rounds)
        print(json.dumps({**growth, **throughput}), flush=True)
    record_figures(args, rows)


def record_figures(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The p50s into bench/results/commit_latency.json, whose groups are the histories ("after 2,000 commits").

    The chart is of the default catalog, SQLite in a temporary directory: runs with --catalog-uri are not recorded.
    """
    if args.catalog_uri:
        print("commit_latency: not recorded: the chart is of the default SQLite catalog", file=sys.stderr)
        return
    series = {
        "icesink": "icesink_p50_ms",
        "icesink, expiring snapshots": "icesink_expiring_p50_ms",
        "pyiceberg fast_append": "pyiceberg_p50_ms",
    }
    record_values(
        "commit_latency",
        {name: {f"after {row['history']:,} commits": row[key] for row in rows} for name, key in series.items()},
        " ".join(["bench/commit_latency.py", *sys.argv[1:]]),
    )


if __name__ == "__main__":
    main()
