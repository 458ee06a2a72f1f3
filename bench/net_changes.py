"""Net changes over a range of many upserts of the same keys, against the changelog of the same range (no Spark).

One keyed table (a long key, text, a decimal, a timestamp, an int, a boolean) takes ``--checkpoints`` checkpoints
of ``--changes`` changes each over ``--keys`` keys (90% upserts, 10% deletes), written by the executors' task
writer and committed as a stream's inline committer does (equality deletes converted to position deletes). Then
``icesink.changes`` reads the whole range, with ``net_changes=True`` and as the full changelog, alternating,
``--repeat`` times each; reported: the fastest of each, and the data files each read opens (whole, or at some
positions). The net changes are checked against the difference between the first and the last state, read by
pyiceberg. Run it in a checkout of another release to compare the two.

    .venv/bin/python bench/net_changes.py [--checkpoints 20] [--changes 10000] [--keys 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.keyed_commits import OPS, UTC_DAY, create_tables
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


def upserts(rng: random.Random, checkpoint: int, keys: int, size: int) -> pa.Table:
    chosen = [rng.randrange(keys) for _ in range(size)]
    ops = ["d" if rng.random() < 0.1 else "u" for _ in chosen]
    return pa.table(
        {
            "id": pa.array(chosen, pa.int64()),
            "name": [f"name {k} at {checkpoint}" for k in chosen],
            "amount": pa.array([None] * size, pa.decimal128(12, 2)),
            "updated": pa.array([UTC_DAY] * size, pa.timestamp("us", "UTC")),
            "n": pa.array([checkpoint] * size, pa.int32()),
            "flag": [True] * size,
            "op": ops,
            "__icesink_order": pa.array(range(size), pa.int64()),
        }
    )


def state(config: CatalogConfig, name: str, snapshot_id: int) -> dict[int, str]:
    rows = open_catalog(config).load_table(name).scan(snapshot_id=snapshot_id, selected_fields=("id", "name"))
    return {r["id"]: r["name"] for r in rows.to_arrow().to_pylist()}


def expected_net(before: dict[int, str], after: dict[int, str]) -> int:
    """Rows of the net changes between two states: a row a delete or insert, two an update."""
    changed = sum(1 for k in set(before) & set(after) if before[k] != after[k])
    return len(set(before) ^ set(after)) + 2 * changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=20)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import icesink
    from icesink.changelog import snapshot_reads

    root = Path(tempfile.mkdtemp(prefix="icesink-net-"))
    try:
        config = CatalogConfig(f"c_{uuid.uuid4().hex[:6]}", f"sqlite:///{root / 'c.db'}", file_uri(root / "wh"))
        upgrade(config)
        (name,) = create_tables(config, 1, 0)
        rng = random.Random(7)
        committer, ledger, catalog = TableCommitter.of(config), Ledger(config), open_catalog(config)
        for checkpoint in range(args.checkpoints):
            table = catalog.load_table(name)
            spec = writer_spec(table, name, "job", ChangeSpec(equality_field_ids=(1,), op_column="op", op_kinds=OPS))
            writer = TaskWriter(spec.for_checkpoint(checkpoint), 0, 0)
            writer.write(upserts(rng, checkpoint, args.keys, args.changes))
            staged = [TableResults(table, name, [writer.complete()])]
            assert stage_tables(ledger, "job", checkpoint, staged, atomic=True)
            committer.commit_atomic("job")
        snapshots = sorted(catalog.load_table(name).metadata.snapshots, key=lambda s: s.sequence_number)
        first, last = snapshots[0].snapshot_id, snapshots[-1].snapshot_id

        opened: list[str] = []
        for method in ("rows", "rows_at"):  # the data files a read opens, whole or at some positions
            original = getattr(snapshot_reads.SnapshotReader, method)

            def counted(self: Any, live: Any, *rest: Any, _original: Any = original) -> Any:
                opened.append(live.path)
                return _original(self, live, *rest)

            setattr(snapshot_reads.SnapshotReader, method, counted)

        report: dict[str, Any] = {**vars(args)}
        for kind, net in (("net", True), ("changelog", False)) * args.repeat:
            opened.clear()
            started = time.perf_counter()
            changes = icesink.changes(name, first, last, net_changes=net, catalog=config)
            seconds = time.perf_counter() - started
            report[f"{kind}_s"] = round(min(seconds, report.get(f"{kind}_s", seconds)), 3)
            report[f"{kind}_rows"], report[f"{kind}_files_opened"] = changes.num_rows, len(opened)
        assert report["net_rows"] == expected_net(state(config, name, first), state(config, name, last))
        print(json.dumps(report))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
