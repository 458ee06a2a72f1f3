"""A seeded generator of change streams and the plain-Python model they must produce."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers.streams import order_for_file_source

CHANGE_SCHEMA = pa.schema(
    [
        pa.field("region", pa.string()),
        pa.field("id", pa.int64()),
        pa.field("value", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("op", pa.string()),
    ]
)
SPARK_CHANGE_SCHEMA = "region string, id long, value string, seq long, op string"
REGIONS = ("eu", "us", "apac")
Key = tuple[str, int]


@dataclass
class ChangeModel:
    """The latest state per key, as a dict; the table must always equal it."""

    rows: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def apply(self, changes: list[dict[str, Any]]) -> None:
        """One checkpoint: per key, the change with the highest seq wins, ties to the later row."""
        latest: dict[Key, dict[str, Any]] = {}
        for change in sorted(enumerate(changes), key=lambda p: (p[1]["seq"], p[0])):
            latest[(change[1]["region"], change[1]["id"])] = change[1]
        for key, change in latest.items():
            if change["op"] == "D":
                self.rows.pop(key, None)
            else:
                self.rows[key] = {k: change[k] for k in ("region", "id", "value", "seq")}

    def expected(self) -> list[dict[str, Any]]:
        return [self.rows[k] for k in sorted(self.rows)]


def random_checkpoint(rng: random.Random, checkpoint: int, keys: int = 12, size: int = 40) -> list[dict[str, Any]]:
    """Inserts, updates and deletes over a small key space: duplicates of a key, ties, deletes of absent keys."""
    changes = []
    for n in range(size):
        changes.append(
            {
                "region": rng.choice(REGIONS),
                "id": rng.randrange(keys),
                "value": f"v{checkpoint}-{n}",
                "seq": checkpoint * 100 + rng.randrange(size // 2),  # collisions make ties
                "op": rng.choices(["I", "U", "D"], weights=[4, 4, 2])[0],
            }
        )
    return changes


def write_checkpoint_file(
    directory: Path, number: int, changes: list[dict[str, Any]], schema: pa.Schema = CHANGE_SCHEMA
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".changes-{number:05d}.tmp"
    pq.write_table(pa.Table.from_pylist(changes, schema=schema), tmp)
    tmp.rename(directory / f"changes-{number:05d}.parquet")
    order_for_file_source(directory / f"changes-{number:05d}.parquet", number)


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    rows = table.select(["region", "id", "value", "seq"]).to_pylist()
    return sorted(rows, key=lambda r: (r["region"], r["id"]))
