"""What a process keeps between reads stays within its budget, and what it drops is read again."""

from __future__ import annotations

import pyarrow as pa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.iceberg import metadata_cache
from icesink.iceberg.read_caches import Kept


def test_values_go_least_recently_used_first_and_one_too_large_is_not_kept() -> None:
    kept: Kept[pa.Table] = Kept(1000, lambda rows: rows.nbytes)
    rows = pa.table({"n": pa.array(range(25), pa.int64())})  # 200 bytes
    for name in "abcd":
        kept.put(name, rows)
    assert kept.get("a") is rows  # now the most recently used
    kept.put("e", rows)
    kept.put("f", rows)  # over 1,000 bytes: the least recently used goes
    assert [name for name in "abcdef" if kept.get(name) is not None] == ["a", "c", "d", "e", "f"]
    kept.put("large", pa.table({"n": pa.array(range(40), pa.int64())}))  # over a quarter of the budget
    assert kept.get("large") is None
    assert kept.get("f") is rows


def test_a_committer_remembering_every_metadata_file_it_writes_stays_within_the_budget(
    sqlite_catalog: CatalogConfig,
) -> None:
    """A committer remembers each metadata file it writes, never reading it: each must count against the budget,
    or a long-running daemon would keep every version of every table it ever committed."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("shop")
    table = catalog.create_table("shop.t", Schema(NestedField(1, "id", LongType())))
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    metadata = catalog.load_table("shop.t").metadata
    per_file = metadata_cache._estimated_size(metadata)
    assert per_file >= 4096
    files = metadata_cache.BUDGET_BYTES // per_file + 10
    for number in range(files):
        metadata_cache.remember(f"file:///remembered/{number}.metadata.json", metadata)
    assert metadata_cache.table_metadata(table.io, table.metadata_location) is not None
    assert metadata_cache._METADATA.get("file:///remembered/0.metadata.json") is None
    assert metadata_cache._METADATA.get(f"file:///remembered/{files - 1}.metadata.json") is not None
