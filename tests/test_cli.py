"""The icesink command line, as a user and a script see it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.cli import main
from icesink.errors import IcesinkError
from icesink.paths import file_uri
from tests.helpers.support import create_orders_table, orders, stage_rows, staged_in_manifests

TABLE = "shop.orders"


def invoke(config: CatalogConfig, *args: str) -> tuple[int, str]:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    result = CliRunner().invoke(main, [*base, *args])
    return result.exit_code, result.output


def committed_table(config: CatalogConfig) -> None:
    create_orders_table(config)
    stage_rows(config, TABLE, "job-a", 0, orders(0, 10))
    stage_rows(config, TABLE, "job-a", 1, orders(10, 5))
    code, output = invoke(config, "committer", "run", "--once")
    assert code == 0, output


def test_snapshots_list_and_show(catalog_config: CatalogConfig) -> None:
    committed_table(catalog_config)
    code, output = invoke(catalog_config, "snapshots", "list", TABLE, "--json")
    assert code == 0, output
    (snapshot,) = json.loads(output)
    assert snapshot["operation"] == "append"
    assert snapshot["job_id"] == "job-a" and snapshot["checkpoint_id"] == 1
    assert snapshot["added_records"] == 15 and snapshot["added_files"] == 2
    assert snapshot["parent_id"] is None
    code, text = invoke(catalog_config, "snapshots", "list", TABLE)
    assert code == 0 and "job-a" in text and str(snapshot["snapshot_id"]) in text
    code, output = invoke(catalog_config, "snapshots", "show", TABLE, str(snapshot["snapshot_id"]), "--json")
    detail = json.loads(output)
    assert detail["summary"]["icesink.max-committed-checkpoint-id"] == "1"
    assert [m["content"] for m in detail["manifests"]] == ["data"]
    assert detail["manifests"][0]["added_files"] == 2
    code, output = invoke(catalog_config, "snapshots", "show", TABLE, "12345")
    assert code != 0 and "no snapshot 12345" in output


def test_tables_and_checkpoints_list(catalog_config: CatalogConfig) -> None:
    committed_table(catalog_config)
    code, output = invoke(catalog_config, "tables", "list", "--json")
    assert code == 0, output
    (table,) = json.loads(output)
    assert table["table"] == TABLE and table["total_records"] == 15
    code, output = invoke(catalog_config, "checkpoints", "list", TABLE, "--json")
    listing = json.loads(output)
    assert [(r["checkpoint_id"], r["status"], r["data_records"]) for r in listing["checkpoints"]] == [
        (0, "committed", 10),
        (1, "committed", 5),
    ]
    # Named as the ledger's columns: scripts written for earlier releases read on.
    first = listing["checkpoints"][0]
    assert first["table_identifier"] == TABLE and first["data_files"] == 1 and first["delete_files"] == 0
    assert first["data_manifest"] is None and first["delete_manifest"] is None  # its files were in its row
    (job,) = listing["jobs"]
    assert (job["job_id"], job["pending"], job["committed"], job["last_committed_checkpoint"]) == ("job-a", 0, 2, 1)
    assert job["lag_seconds"] == 0.0


def test_checkpoints_list_shows_the_lag_of_waiting_and_failed_checkpoints(catalog_config: CatalogConfig) -> None:
    import time

    committed_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 2, orders(15, 5))
    stage_rows(catalog_config, TABLE, "job-b", 0, orders(20, 5))
    broken = staged_in_manifests(catalog_config, TABLE, "job-b", 0)  # as a release before staged it
    Path(broken.manifests.data.path.removeprefix("file://")).unlink()
    time.sleep(0.2)
    code, output = invoke(catalog_config, "committer", "run", "--once", "--table", TABLE)
    assert code != 0  # job-b's manifest is gone: the table stops, job-a's checkpoint 2 is already in
    code, output = invoke(catalog_config, "checkpoints", "list", TABLE, "--json")
    listing = json.loads(output)
    jobs = {j["job_id"]: j for j in listing["jobs"]}
    assert (jobs["job-a"]["pending"], jobs["job-a"]["last_committed_checkpoint"]) == (0, 2)
    assert (jobs["job-b"]["pending"], jobs["job-b"]["failed"], jobs["job-b"]["committed"]) == (1, 1, 0)
    assert jobs["job-b"]["lag_seconds"] >= 0.2
    (failed,) = [r for r in listing["checkpoints"] if r["job_id"] == "job-b"]
    assert failed["status"] == "failed" and broken.manifests.data.path in failed["error"]
    code, text = invoke(catalog_config, "checkpoints", "list", TABLE, "--limit", "1")
    assert code == 0
    assert "failed" in text and broken.manifests.data.path in text and "lag" in text
    newest_rows = text.split("\n\n")[1].splitlines()[2:]
    assert [line.split()[:3] for line in newest_rows] == [["job-a", "2", "committed"], ["job-b", "0", "failed"]]


def test_unknown_table_is_one_clear_line(catalog_config: CatalogConfig) -> None:
    code, output = invoke(catalog_config, "snapshots", "list", "shop.nope")
    assert code == 2
    assert output.strip().startswith("error: table 'shop.nope' does not exist")
    assert "Traceback" not in output


def test_db_upgrade_then_use_from_a_fresh_database(tmp_path: Path) -> None:
    config = CatalogConfig("fresh", f"sqlite:///{tmp_path / 'c.db'}", file_uri(tmp_path))
    code, output = invoke(config, "tables", "list")
    assert code == 2 and re.search(r"icesink --uri .+ db upgrade", output)
    code, output = invoke(config, "db", "upgrade")
    assert code == 0 and "schema revision" in output
    assert invoke(config, "tables", "list")[0] == 0


def test_console_script_is_installed() -> None:
    done = subprocess.run(
        [Path(sys.executable).parent / "icesink", "--help"], capture_output=True, text=True, check=True
    )
    assert "snapshots" in done.stdout and "committer" in done.stdout


def test_scan_prints_rows_with_deletes_applied(catalog_config: CatalogConfig) -> None:
    committed_table(catalog_config)
    code, output = invoke(catalog_config, "scan", TABLE, "--limit", "3", "--filter", "id >= 5", "--json")
    assert code == 0, output
    rows = [json.loads(line) for line in output.splitlines()]
    assert len(rows) == 3 and all(r["id"] >= 5 for r in rows)
    code, text = invoke(catalog_config, "scan", TABLE, "--limit", "0")
    assert code == 0 and text.strip().endswith("(15 of 15 rows)")


def test_a_misspelt_icesink_variable_is_a_startup_error(catalog_config: CatalogConfig) -> None:
    base = ["--catalog", catalog_config.name, "--uri", catalog_config.uri, "--warehouse", catalog_config.warehouse]
    result = CliRunner().invoke(main, [*base, "tables", "list"], env={"ICESINK_METRIC_PORT": "9464"})
    assert result.exit_code == 2
    assert (
        "unknown setting ICESINK_METRIC_PORT" in result.output and "did you mean ICESINK_METRICS_PORT" in result.output
    )


def test_committer_options_name_their_environment_variables() -> None:
    result = CliRunner().invoke(main, ["committer", "run", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for name in ("ICESINK_POLL_INTERVAL", "ICESINK_LEASE_TTL", "ICESINK_METRICS_PORT", "ICESINK_EXPIRE_SNAPSHOTS"):
        assert f"env var: {name}" in result.output


BAD_ARGUMENTS = [
    (["scan", "nope"], "is not a table identifier"),
    (["scan", "shop.nope"], "does not exist"),
    (["scan", TABLE, "--filter", "id >"], "cannot be parsed"),
    (["scan", TABLE, "--filter", "no_such_column > 1"], "does not fit the table"),
    (["scan", TABLE, "--filter", "id > 'abc'"], "does not fit the table"),
    (["scan", TABLE, "--snapshot", "12345"], "has no snapshot 12345"),
    (["scan", TABLE, "--limit", "many"], "Invalid value"),
    (["scan", TABLE, "--limit", "-1"], "-1 is not in the range x>=0"),
    (["changes", TABLE, "--limit", "-1"], "-1 is not in the range x>=0"),
    (["checkpoints", "list", TABLE, "--limit", "-1"], "-1 is not in the range x>=0"),
    (["snapshots", "list", "nope"], "is not a table identifier"),
    (["snapshots", "list", "shop.nope"], "does not exist"),
    (["snapshots", "show", TABLE, "12345"], "has no snapshot 12345"),
    (["snapshots", "show", TABLE, "latest"], "Invalid value"),
    (["checkpoints", "list", "shop.nope"], "does not exist"),
    (["checkpoints", "list", ".orders"], "is not a table identifier"),
    (["committer", "run", "--once", "--table", "shop.nope"], "does not exist"),
    (["committer", "run", "--once", "--poll-interval", "soon"], "Invalid value"),
    (["committer", "gc", "--table", "shop.nope"], "does not exist"),
    (["committer", "gc", "--older-than", "5x"], "is not an age"),
    (["tables", "lists"], "No such command"),
]


@pytest.mark.parametrize(("arguments", "says"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_every_command_with_bad_arguments_says_why_in_one_line_with_exit_code_2(
    sqlite_catalog: CatalogConfig, arguments: list[str], says: str
) -> None:
    committed_table(sqlite_catalog)
    base = ["--catalog", sqlite_catalog.name, "--uri", sqlite_catalog.uri, "--warehouse", sqlite_catalog.warehouse]
    result = CliRunner().invoke(main, [*base, *arguments])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output and not isinstance(result.exception, IcesinkError | KeyError)
    lines = [line for line in result.output.splitlines() if line.strip()]
    if lines[-1].startswith("Error:"):  # click's usage errors: usage, a hint, then the error
        assert says in lines[-1]
    else:
        (line,) = lines
        assert line.startswith("error: ") and says in line


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--uri", "definitely not a url", "--warehouse", "file:///tmp/w"], "is not a database URL"),
        (["--uri", "postgresql+psycopg2://nobody@127.0.0.1:1/db", "--warehouse", "file:///tmp/w"], "is unreachable"),
        (["--uri", "postgresql+psycopg2://nobody@127.0.0.1:1/db"], "has no warehouse"),
        (["--uri", "sqlite:////tmp/x.db", "--warehouse", "file:///tmp/a#b"], "query or fragment"),
    ],
    ids=["not-a-url", "unreachable", "no-warehouse", "warehouse-with-hash"],
)
def test_bad_catalog_settings_are_one_line_with_exit_code_2(options: list[str], says: str) -> None:
    result = CliRunner().invoke(main, [*options, "tables", "list"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("error: ") and says in line


def test_scan_json_is_valid_json_for_every_value(sqlite_catalog: CatalogConfig) -> None:
    """NaN, infinities, binary and decimals in strict JSON (README, "JSON output")."""
    import decimal

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, DecimalType, DoubleType, LongType, NestedField

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("odd")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "x", DoubleType()),
        NestedField(3, "blob", BinaryType()),
        NestedField(4, "price", DecimalType(38, 10)),
    )
    table = catalog.create_table("odd.values", schema)
    table.append(
        pa.table(
            {
                "id": pa.array([1, 2, 3, 4], pa.int64()),
                "x": [float("nan"), float("inf"), float("-inf"), 1.5],
                "blob": [b"\x00\xff", b"", None, b"abc"],
                "price": [decimal.Decimal("1234567890123456789012345678.0123456789"), None, None, None],
            },
            schema=schema.as_arrow(),
        )
    )

    def strict(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    code, output = invoke(sqlite_catalog, "scan", "odd.values", "--json")
    assert code == 0, output
    rows = sorted((json.loads(line, parse_constant=strict) for line in output.splitlines()), key=lambda r: r["id"])
    assert [r["x"] for r in rows] == ["NaN", "Infinity", "-Infinity", 1.5]
    assert [r["blob"] for r in rows] == ["AP8=", "", None, "YWJj"]
    assert rows[0]["price"] == "1234567890123456789012345678.0123456789"


def test_one_output_option_for_every_command(sqlite_catalog: CatalogConfig) -> None:
    """``--output json`` before the command says what each command's ``--json`` says; text stays the default."""
    committed_table(sqlite_catalog)
    for command in (["tables", "list"], ["snapshots", "list", TABLE], ["checkpoints", "list", TABLE], ["jobs", "list"]):
        code, own = invoke(sqlite_catalog, *command, "--json")
        assert code == 0, own
        code, global_option = invoke(sqlite_catalog, "--output", "json", *command)
        assert code == 0, global_option
        assert json.loads(global_option) == json.loads(own), command
        code, text = invoke(sqlite_catalog, *command)
        assert code == 0 and not text.lstrip().startswith(("[", "{")), (command, text)
    code, scanned = invoke(sqlite_catalog, "--output", "json", "scan", TABLE, "--limit", "0")
    assert sorted(json.loads(line)["id"] for line in scanned.splitlines()) == list(range(15))
    code, output = invoke(sqlite_catalog, "--output", "yaml", "tables", "list")
    assert code == 2 and "'yaml' is not one of 'text', 'json'" in output


def test_text_tables_are_drawn_for_a_terminal_and_plain_for_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    from icesink.cli.output import Column, progress, text_table

    rows = [{"name": "ü x/%", "n": 1}, {"name": None, "n": 22}]
    columns = [Column("name", lambda r: r["name"]), Column("n", lambda r: r["n"])]
    plain = text_table(rows, columns)
    assert plain.splitlines() == ["name   n ", "-----  --", "ü x/%  1 ", "       22"]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    drawn = text_table(rows, columns)
    assert drawn != plain and "ü x/%" in drawn and "22" in drawn and "─" in drawn
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert list(progress(["a", "b", "c"], "testing")) == ["a", "b", "c"]


def test_changes_over_many_snapshots_report_their_progress(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import icesink
    from icesink.cli.output import quiet_progress

    committed_table(sqlite_catalog)
    stage_rows(sqlite_catalog, TABLE, "job-a", 2, orders(15, 3))
    assert invoke(sqlite_catalog, "committer", "run", "--once")[0] == 0
    seen: list[tuple[int, int]] = []
    changes = icesink.changes(TABLE, None, catalog=sqlite_catalog, progress=lambda *step: seen.append(step))
    assert changes.num_rows == 18
    assert len(open_catalog(sqlite_catalog).load_table(TABLE).snapshots()) == 2
    # Each of the two snapshots planned, then one step for reading the files they name.
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)], seen
    with quiet_progress("reading") as report:  # silent in a pipe
        report(1, 2)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with quiet_progress("reading") as report:
        report(1, 2)
        report(2, 2)
