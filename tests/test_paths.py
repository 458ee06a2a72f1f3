"""One path rule: the file at the location a manifest names exists, whatever the names and values are.

These run without Spark: files are written by the executors' own task writer,
staged and committed as the driver does, then read back by icesink, pyiceberg
and iceberg-rust, and checked by ``committer gc``. The Spark end of the same
rule (both writers, DuckDB and Iceberg Java) is in ``test_hostile_names.py``.
"""

from __future__ import annotations

import datetime
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import icesink
from icesink import paths
from icesink.catalog import database
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.gc import collect_garbage
from icesink.committer.staging import stage_checkpoint
from icesink.errors import ConfigError
from tests.helpers.outcomes import iceberg_rust_sql
from tests.helpers.support import write_files

# Characters that break paths and URIs, with letters so that values also share prefixes.
HOSTILE = [*" %/?#=+&\\:*~'\"<>|\t\n.é名😀", "e\u0301", "\u00e9", "\u00a0", "a", "Z", "0"]
hostile_text = st.one_of(
    st.lists(st.sampled_from(HOSTILE), max_size=10).map("".join),
    st.text(max_size=8),
    st.sampled_from(["", ".", "..", "null", "%20", "%25", "a" * 300, "😀" * 80, "名" * 100]),
)
# Column names as Iceberg allows them and Spark finds hard.
CITY, NAME, CODE = "city name/é", "名前.`x`", "a.b"
PARTITION_BY = [CITY, "truncate(2, `名前.``x```)", f"bucket(4, {CODE})"]


def test_segments_are_ascii_unambiguous_and_bounded() -> None:
    for text in ["New York", "50%", "a/b", "q?h#", "São Paulo", "😀", "", "x" * 1000, "%20", "."]:
        encoded = paths.segment(text)
        assert encoded.isascii() and not {" ", "/", "#", "?"} & set(encoded)
        assert len(encoded) <= paths.MAX_SEGMENT
        assert encoded not in (".", "..")
    assert paths.segment("New York") == "New%20York" and paths.segment("50%") == "50%25"
    assert paths.segment("x" * 1000) != paths.segment("x" * 999)  # cut values stay apart
    # Cut segments never end inside a %XX escape.
    long = paths.segment("名" * 100)
    assert not long.split("~")[0].endswith(("%", "%E"))


def test_locations_are_parsed_literally() -> None:
    parsed = paths.parse("file:///tmp/my dir é/city=New%20York/x.parquet")
    assert parsed.path == "/tmp/my dir é/city=New%20York/x.parquet" and parsed.is_local
    assert paths.parse("s3://bucket/a%20b/c").path == "/a%20b/c"
    assert paths.parse("file:/x/y").path == "/x/y" and paths.parse("/x/y").is_local
    # gc's comparison form: every spelling of a location compares equal, and either reading of an escape.
    assert paths.normal_form("file:/x//y") == paths.normal_form("/x/y") == paths.normal_form("file:///x/y")
    assert paths.normal_form("s3a://b/k") == paths.normal_form("s3://b/k")
    assert paths.normal_form("file:///a%20b") == paths.normal_form("file:///a b")


def test_a_warehouse_that_uri_parsers_would_cut_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="query or fragment"):
        CatalogConfig.resolve(name="x", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse="file:///tmp/a#b")
    config = CatalogConfig.resolve(name="x", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=str(tmp_path / "a b"))
    assert config.warehouse == f"file://{tmp_path}/a b"  # a plain directory gets a scheme, spelled literally


def test_embedded_default_in_a_directory_with_a_space_and_a_percent(tmp_path: Path) -> None:
    root = tmp_path / "my 50% wh é"
    config = CatalogConfig.embedded_default(root)
    assert config.warehouse == f"file://{root}"
    from icesink.catalog.config import sqlite_path

    assert sqlite_path(config.uri) == root / "catalog.db"
    database.upgrade(config)
    assert (root / "catalog.db").exists()


def _catalog(root: Path) -> CatalogConfig:
    warehouse = root / "wh é 名 50% x"
    warehouse.mkdir(parents=True)
    config = CatalogConfig(f"c{abs(hash(root)) % 10**8}", f"sqlite:///{root / 'catalog.db'}", paths.file_uri(warehouse))
    database.upgrade(config)
    return config


def _create(config: CatalogConfig, identifier: str, partition_by: list[str]) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from icesink.sink.tables import parse_partition_by

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, CITY, StringType(), required=False),
        NestedField(3, NAME, StringType(), required=False),
        NestedField(4, CODE, StringType(), required=False),
    )
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    return catalog.create_table(identifier, schema, partition_spec=parse_partition_by(identifier, schema, partition_by))


def _rows(values: list[str | None]) -> pa.Table:
    count = len(values)
    return pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            CITY: pa.array(values, pa.string()),
            NAME: pa.array(list(reversed(values)), pa.string()),
            CODE: pa.array([None if v is None else v[:3] for v in values], pa.string()),
        }
    )


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(["id", CITY, NAME, CODE]).to_pylist(), key=lambda r: r["id"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.none(), hostile_text), min_size=1, max_size=12))
def test_hostile_partition_values_land_where_the_manifest_says(
    tmp_path_factory: pytest.TempPathFactory, values: list[str | None]
) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp(), prefix="dir with space é "))
    config = _catalog(root)
    identifier = "ns with space.t%名"
    table = _create(config, identifier, PARTITION_BY)
    rows = _rows(values)
    result = write_files(table, identifier, "job/with?odd#id%", 0, rows)
    stage_checkpoint(Ledger(config), table, identifier, "job/with?odd#id%", 0, [result])
    TableCommitter.of(config).commit_pending(identifier)
    table = open_catalog(config).load_table(identifier)

    # Every file a manifest names exists at exactly that location.
    for task in table.scan().plan_files():
        assert Path(paths.parse(task.file.file_path).path).is_file(), task.file.file_path
    expected = _sorted(rows)
    assert _sorted(icesink.read(table)) == expected
    assert _sorted(table.scan().to_arrow()) == expected
    rust = iceberg_rust_sql(table, "SELECT * FROM t")
    assert _sorted(rust) == expected
    # Nothing the table references is garbage, however long ago it was written.
    report = collect_garbage(open_catalog(config), config, identifier, datetime.timedelta(0), dry_run=True)
    assert report.deleted == [] and report.referenced == report.files_seen
    database.dispose_engines()
