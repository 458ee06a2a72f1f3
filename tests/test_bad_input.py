"""Operator and input mistakes from the field: each gets one line naming the thing and the fix, and loses nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.cli import main
from icesink.errors import ConfigError, UnsupportedTableError
from tests.helpers.support import create_orders_table, orders, stage_rows, table_ids

TABLE = "shop.orders ü %/x"


def cli(config: CatalogConfig, *args: str) -> tuple[int, str, str]:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    result = CliRunner().invoke(main, [*base, *args])
    return result.exit_code, result.stdout, result.stderr


def upgrade_to_v3_as_another_tool_would(config: CatalogConfig, identifier: str) -> None:
    """Point the catalog at a format 3 copy of the table's metadata (pyiceberg 0.12 cannot write one itself)."""
    import sqlalchemy as sa

    table = open_catalog(config).load_table(identifier)
    source = Path(table.metadata_location.removeprefix("file://"))
    metadata = json.loads(source.read_text())
    metadata["format-version"] = 3
    metadata["next-row-id"] = 0
    target = source.with_name("99999-format-3.metadata.json")
    target.write_text(json.dumps(metadata))
    with sa.create_engine(config.uri).begin() as connection:
        connection.execute(
            sa.text("UPDATE iceberg_tables SET metadata_location = :new WHERE metadata_location = :old"),
            {"new": f"file://{target}", "old": table.metadata_location},
        )


def test_a_format_3_table_is_refused_before_anything_is_written(sqlite_catalog: CatalogConfig) -> None:
    from icesink.sink.tables import resolve_table

    create_orders_table(sqlite_catalog, TABLE)
    stage_rows(sqlite_catalog, TABLE, "job", 0, orders(0, 5))  # staged while the table was format 2
    upgrade_to_v3_as_another_tool_would(sqlite_catalog, TABLE)
    catalog = open_catalog(sqlite_catalog)
    # A stream starting on it (the same check icesink.stream makes before its query starts).
    with pytest.raises(UnsupportedTableError, match=f"table {TABLE} is Iceberg format version 3; .*format-version=2"):
        resolve_table(catalog, sqlite_catalog, TABLE, None, False, ())  # type: ignore[arg-type]
    # The committer: the staged checkpoint waits, marked failed with the reason.
    code, _, err = cli(sqlite_catalog, "committer", "run", "--once")
    assert code == 2 and "format version 3" in err and "Traceback" not in err
    (row,) = Ledger(sqlite_catalog).pending(TABLE)
    assert row.status == "failed" and "format version 3" in (row.error or "")
    # Maintenance, dry run or not.
    for extra in ([], ["--dry-run"]):
        code, _, err = cli(sqlite_catalog, "maintain", TABLE, "--all", *extra)
        assert code == 2 and "format version 3" in err and "Traceback" not in err


def test_a_format_1_table_is_refused_with_the_commands_that_upgrade_it(sqlite_catalog: CatalogConfig) -> None:
    from icesink.sink.tables import resolve_table
    from tests.helpers.support import _orders_schema

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists(TABLE.rsplit(".", 1)[0])
    catalog.create_table(TABLE, schema=_orders_schema(), properties={"format-version": "1"})
    with pytest.raises(UnsupportedTableError) as refused:
        resolve_table(catalog, sqlite_catalog, TABLE, None, False, ())  # type: ignore[arg-type]
    message = str(refused.value)
    assert f"table {TABLE} is Iceberg format version 1" in message and "Nothing was written" in message
    assert "upgrade_table_version(2)" in message and "'format-version'='2'" in message
    code, _, err = cli(sqlite_catalog, "maintain", TABLE, "--all", "--dry-run")
    assert code == 2 and "format version 1" in err and "Traceback" not in err
    # What it advises works: upgraded, the table is taken.
    with catalog.load_table(TABLE).transaction() as transaction:
        transaction.upgrade_table_version(2)
    resolve_table(catalog, sqlite_catalog, TABLE, None, False, ())  # type: ignore[arg-type]


def test_a_maintenance_dry_run_refuses_what_the_real_run_refuses(sqlite_catalog: CatalogConfig) -> None:
    table = create_orders_table(sqlite_catalog, TABLE)
    for checkpoint in range(3):
        stage_rows(sqlite_catalog, TABLE, "job", checkpoint, orders(checkpoint * 5, 5))
        assert cli(sqlite_catalog, "committer", "run", "--once")[0] == 0
    with table.transaction() as change:  # another tool sets a codec no writer here honours
        change.set_properties({"write.parquet.compression-codec": "lzo"})
    head = open_catalog(sqlite_catalog).load_table(TABLE).current_snapshot().snapshot_id
    for extra in (["--dry-run"], []):
        code, out, err = cli(sqlite_catalog, "maintain", TABLE, "--all", *extra)
        assert code == 2 and "write.parquet.compression-codec" in err and "would rewrite" not in out, err
    assert open_catalog(sqlite_catalog).load_table(TABLE).current_snapshot().snapshot_id == head
    assert table_ids(sqlite_catalog, TABLE) == list(range(15))


def test_equality_deletes_keyed_on_a_column_dropped_since_still_apply(sqlite_catalog: CatalogConfig) -> None:
    """Another tool drops the key column of equality deletes the table keeps: reads, conversion and compaction
    find the key in the files by its field id, through the schema the deletes were written with."""
    import pyarrow as pa

    import icesink
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.iceberg.describe import writer_spec
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter

    create_orders_table(sqlite_catalog, TABLE)
    catalog = open_catalog(sqlite_catalog)
    with catalog.load_table(TABLE).transaction() as change:  # deletes stay equality deletes at commit
        change.set_properties({"icesink.equality-deletes.convert-at-commit": "false"})

    def commit(checkpoint: int, rows: pa.Table, ops: list[str]) -> None:
        table = catalog.load_table(TABLE)
        changes = rows.append_column("op", pa.array(ops)).append_column(
            "__icesink_order", pa.array(range(rows.num_rows), pa.int64())
        )
        spec = writer_spec(table, TABLE, "job", ChangeSpec((1,), op_column="op")).for_checkpoint(checkpoint)
        writer = TaskWriter(spec, 0, 0)
        writer.write(changes)
        assert stage_checkpoint(Ledger(sqlite_catalog), table, TABLE, "job", checkpoint, [writer.complete()])
        TableCommitter.of(sqlite_catalog).commit_pending(TABLE)

    commit(0, orders(0, 4), ["I"] * 4)
    commit(1, orders(1, 2), ["D", "U"])  # deletes id 1, rewrites id 2
    table = catalog.load_table(TABLE)
    assert int(table.current_snapshot().summary["total-equality-deletes"]) == 6  # every written key has one
    with table.update_schema() as update:
        update.delete_column("id")
    expected = sorted(r["name"] for r in orders(0, 4).to_pylist() if r["id"] != 1)
    got = icesink.read(TABLE, catalog=sqlite_catalog)
    assert got.column_names == ["name", "amount", "ts"]
    assert sorted(got.column("name").to_pylist()) == expected
    # The changelog too: id 1 deleted; id 2 rewritten with the same values is no change.
    first = table.snapshots()[0].snapshot_id
    changes = icesink.changes(TABLE, first, catalog=sqlite_catalog)
    assert list(zip(changes.column("_change_type").to_pylist(), changes.column("name").to_pylist(), strict=True)) == [
        ("delete", orders(1, 1).column("name")[0].as_py())
    ]
    code, _, err = cli(sqlite_catalog, "changes", TABLE)
    assert code == 0, err
    code, _, err = cli(sqlite_catalog, "maintain", TABLE, "--all", "--json")
    assert code == 0, err
    table = catalog.load_table(TABLE)
    assert table.current_snapshot().summary["total-equality-deletes"] == "0"
    assert sorted(table.scan().to_arrow().column("name").to_pylist()) == expected  # pyiceberg
    assert sorted(icesink.read(TABLE, catalog=sqlite_catalog).column("name").to_pylist()) == expected


def test_a_corrupt_metadata_file_is_named_and_hides_no_other_table(sqlite_catalog: CatalogConfig) -> None:
    create_orders_table(sqlite_catalog, TABLE)
    create_orders_table(sqlite_catalog, "shop.fine")
    broken = open_catalog(sqlite_catalog).load_table(TABLE).metadata_location
    Path(broken.removeprefix("file://")).write_text('{"format-version": 2, "not": "iceberg"}')
    code, out, err = cli(sqlite_catalog, "tables", "list")
    assert code == 2 and "shop.fine" in out and TABLE in out
    assert f"table {TABLE}: its metadata file {broken} cannot be read" in err and "Traceback" not in err
    for args in (["scan", TABLE], ["snapshots", "list", TABLE], ["maintain", TABLE, "--all"]):
        code, _, err = cli(sqlite_catalog, *args)
        assert code == 2 and "cannot be read" in err and "Traceback" not in err, (args, err)
    code, out, _ = cli(sqlite_catalog, "tables", "list", "--json")
    by_name = {r["table"]: r for r in json.loads(out)}
    assert by_name["shop.fine"]["error"] is None and "cannot be read" in by_name[TABLE]["error"]


def test_a_read_only_command_on_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/missing dir/x.db"
    result = CliRunner().invoke(main, ["--uri", uri, "--warehouse", tmp_path.as_uri(), "tables", "list"])
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert not (tmp_path / "missing dir").exists()
    # The command the error suggests, exactly as written there, creates the catalog.
    import shlex

    (suggested,) = re.findall(r"`(icesink [^`]+)`", result.stderr)
    (tmp_path / "missing dir").mkdir()
    created = CliRunner().invoke(main, shlex.split(suggested)[1:])
    assert created.exit_code == 0, created.output
    assert CliRunner().invoke(main, ["--uri", uri, "--warehouse", tmp_path.as_uri(), "tables", "list"]).exit_code == 0


def test_changes_over_a_backwards_range_say_so(sqlite_catalog: CatalogConfig) -> None:
    create_orders_table(sqlite_catalog, TABLE)
    for checkpoint in range(2):
        stage_rows(sqlite_catalog, TABLE, "job", checkpoint, orders(checkpoint * 5, 5))
        assert cli(sqlite_catalog, "committer", "run", "--once")[0] == 0
    first, second = (s.snapshot_id for s in open_catalog(sqlite_catalog).load_table(TABLE).snapshots())
    code, _, err = cli(sqlite_catalog, "changes", TABLE, "--from", str(second), "--to", str(first))
    assert code == 2 and "the range is backwards" in err and "swap them" in err, err
    code, out, _ = cli(sqlite_catalog, "changes", TABLE, "--from", str(first), "--to", str(second), "--json")
    assert code == 0 and len(out.splitlines()) == 5


def test_json_output_writes_decimals_without_exponents() -> None:
    import decimal

    from icesink.cli import json_value

    assert json_value([decimal.Decimal("-1E-9"), decimal.Decimal("1.50E+3")]) == ["-0.000000001", "1500"]


@pytest.mark.parametrize("command", [["tables", "list"], ["checkpoints", "list", "shop.t"], ["scan", "shop.t"]])
def test_no_read_only_command_creates_a_missing_sqlite_catalog(tmp_path: Path, command: list[str]) -> None:
    uri = f"sqlite:///{tmp_path}/missing dir/x.db"
    result = CliRunner().invoke(main, ["--uri", uri, "--warehouse", tmp_path.as_uri(), *command])
    assert result.exit_code == 2 and "does not exist" in result.stderr, result.output
    assert not (tmp_path / "missing dir").exists()


def test_an_empty_catalog_name_is_refused_not_taken_for_the_embedded_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--catalog", "", "tables", "list"])
    assert result.exit_code == 2 and "the catalog name is empty" in result.stderr, result.output
    monkeypatch.setenv("ICESINK_CATALOG", " ")
    result = CliRunner().invoke(main, ["tables", "list"])
    assert result.exit_code == 2 and "ICESINK_CATALOG is empty" in result.stderr, result.output
    assert not (tmp_path / "warehouse").exists()


def test_scan_text_output_shows_nested_values_binary_and_decimals_as_json_not_python() -> None:
    import decimal

    from icesink.cli.output import cell as _cell

    assert _cell(decimal.Decimal("-1E-9")) == "-0.000000001"
    assert _cell(b"\x00\xff") == "AP8="
    assert _cell({"dd": decimal.Decimal("0.00"), "b": [b"\x01", None]}) == '{"dd": "0.00", "b": ["AQ==", null]}'
    assert _cell(7) == 7 and _cell(None) is None


def test_a_key_inside_a_list_or_map_is_refused_with_its_name() -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, ListType, LongType, MapType, NestedField, StringType, StructType

    from icesink.errors import ConfigError
    from icesink.sink.change_stream import _table_key_field

    item = StructType(NestedField(4, "sku ü", LongType(), required=True))
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "lines", ListType(3, item, element_required=True), required=True),
        NestedField(5, "by name", MapType(6, StringType(), 7, StructType(NestedField(8, "n", IntegerType()))), False),
        NestedField(9, "s", StructType(NestedField(10, "k", LongType(), required=True)), required=True),
    )
    assert _table_key_field(schema, "shop.o", "s.k").field_id == 10
    for name in ("lines.element.sku ü", "by name.value.n"):
        with pytest.raises(ConfigError, match=r"table shop\.o: equality field .* is inside a list or a map"):
            _table_key_field(schema, "shop.o", name)


def test_every_stream_argument_is_an_option_described_once() -> None:
    """icesink.stream's signature, StreamOptions and the docstring's Args cannot drift apart."""
    import inspect

    from icesink.sink.options import StreamOptions
    from icesink.sink.stream import stream

    arguments = [name for name in inspect.signature(stream).parameters if name != "df"]
    described = [name for name, _, _ in StreamOptions.reference()]
    assert sorted(arguments) == sorted(described)
    doc = stream.__doc__ or ""
    for name, _, meaning in StreamOptions.reference():
        assert f"        {name}: " in doc and meaning.split()[0] in doc, name


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"writer": "parquet"}, r"table shop\.o ü: writer must be one of \('auto', 'spark', 'arrow'\), not 'parquet'"),
        ({"committer": None}, r"committer must be one of \('inline', 'daemon'\), not None"),
        ({"committer": "daemon", "maintain": True}, "maintain applies to the inline committer.*--maintain"),
        ({"committer": "daemon", "expire_snapshots": True}, "--expire-snapshots to icesink committer run"),
    ],
)
def test_stream_options_refuse_what_cannot_work(options: dict[str, Any], message: str) -> None:
    from icesink.errors import ConfigError
    from icesink.sink.options import Committer, StreamOptions, Writer

    with pytest.raises(ConfigError, match=message):
        StreamOptions(table="shop.o ü", **options)
    typed = StreamOptions(table="t", committer="daemon", writer="arrow")  # type: ignore[arg-type]
    assert typed.committer is Committer.DAEMON and typed.writer is Writer.ARROW


def test_the_option_reference_gives_plain_defaults() -> None:
    from icesink.sink.options import StreamOptions

    defaults = {name: default for name, default, _ in StreamOptions.reference()}
    assert defaults["table"] == "required (or tables)"
    assert defaults["committer"] == "'inline'" and defaults["writer"] == "'auto'"
    assert defaults["maintain"] == "False" and defaults["partition_by"] == "()"


def test_a_key_column_added_after_older_files_were_written_reads_as_null_there(sqlite_catalog: CatalogConfig) -> None:
    """Upserts keyed on (id, tenant), tenant added by another tool after the table's first files: the
    conversion at commit reads tenant as null in those files, as every reader does, instead of failing."""
    import pyarrow as pa
    from pyiceberg.types import IntegerType

    import icesink
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.iceberg.describe import writer_spec
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter

    create_orders_table(sqlite_catalog, TABLE)
    catalog = open_catalog(sqlite_catalog)
    catalog.load_table(TABLE).append(orders(1, 2))  # ids 1 and 2, written before tenant exists
    with catalog.load_table(TABLE).update_schema() as update:
        update.add_column("tenant", IntegerType())
    table = catalog.load_table(TABLE)
    rows = orders(1, 1).append_column("tenant", pa.array([5], pa.int32()))
    changes = rows.append_column("op", pa.array(["U"])).append_column("__icesink_order", pa.array([0], pa.int64()))
    tenant = table.schema().find_field("tenant").field_id
    spec = writer_spec(table, TABLE, "job", ChangeSpec((1, tenant), op_column="op")).for_checkpoint(0)
    writer = TaskWriter(spec, 0, 0)
    writer.write(changes)
    assert stage_checkpoint(Ledger(sqlite_catalog), table, TABLE, "job", 0, [writer.complete()])
    (outcome,) = TableCommitter.of(sqlite_catalog).commit_pending(TABLE)
    assert outcome.snapshot_id is not None
    got = icesink.read(TABLE, catalog=sqlite_catalog)
    # (1, null) and (1, 5) are different keys: both rows stay, as pyiceberg reads them too.
    assert sorted(zip(got.column("id").to_pylist(), got.column("tenant").to_pylist(), strict=True), key=repr) == [
        (1, 5),
        (1, None),
        (2, None),
    ]
    pyiceberg_rows = catalog.load_table(TABLE).scan().to_arrow()
    assert sorted(pyiceberg_rows.column("id").to_pylist()) == [1, 1, 2]


def test_a_name_longer_than_the_catalog_holds_is_refused_naming_the_limit() -> None:
    from icesink.catalog.loader import check_identifier

    check_identifier("shop." + "ü" * 255)  # exactly what the catalog's column holds
    for identifier, part in (("shop." + "ü" * 256, "table name"), ("n" * 256 + ".orders", "namespace")):
        with pytest.raises(ConfigError, match=f"its {part} has 256 characters; the catalog holds at most 255"):
            check_identifier(identifier)
