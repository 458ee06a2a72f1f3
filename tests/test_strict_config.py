"""Strict configuration: a misspelt or out-of-range setting is one clear error, before anything is created.

Spark-free: catalog names (CLI, environment, Python API), ``starting`` and the
options of the change stream, CLI value ranges, the ``icesink.maintain.*``
table properties, the ``icesink.*`` names a stream may give a new table, and
concurrent ``icesink db upgrade`` runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.cli import main
from icesink.errors import ConfigError
from icesink.paths import file_uri
from tests.helpers.support import create_orders_table

ROOT = Path(__file__).parent.parent
TABLE = "shop.orders"


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


# --- 1. A catalog name nobody defined -------------------------------------------------------------------------


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory of a user with only catalog ``prod`` defined (in the environment), and no yaml."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path / "pyiceberg-home"))
    monkeypatch.delenv("ICESINK_CATALOG", raising=False)
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__URI", f"sqlite:///{tmp_path / 'prod' / 'catalog.db'}")
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__WAREHOUSE", file_uri(tmp_path / "prod"))
    return work


def assert_undefined_catalog_message(text: str) -> None:
    assert "catalog 'prdo'" in text and "is not defined" in text
    assert "defined catalogs: 'prod'" in text
    assert "PYICEBERG_CATALOG__PRDO__URI" in text and ".pyiceberg.yaml" in text


def assert_nothing_created(tmp_path: Path) -> None:
    assert files_under(tmp_path) == [], "a misnamed catalog must create no database and no warehouse"


def test_cli_with_an_undefined_catalog_name_is_refused_and_creates_nothing(user_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--catalog", "prdo", "tables", "list"])
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("error: ")
    assert_undefined_catalog_message(line)
    assert_nothing_created(tmp_path)


def test_icesink_catalog_naming_an_undefined_catalog_is_refused_and_creates_nothing(
    user_dir: Path, tmp_path: Path
) -> None:
    """The command line in its own process, as a deployment runs it: the name from ICESINK_CATALOG."""
    done = subprocess.run(
        [sys.executable, "-m", "icesink.cli", "checkpoints", "list", TABLE],
        cwd=user_dir,
        env={**os.environ, "PYTHONPATH": str(ROOT), "ICESINK_CATALOG": "prdo"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert_undefined_catalog_message(line)
    assert "ICESINK_CATALOG=prdo" in line
    assert_nothing_created(tmp_path)


def test_python_api_with_an_undefined_catalog_name_is_refused_and_creates_nothing(
    user_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as read:
        icesink.read(TABLE, catalog="prdo")
    assert_undefined_catalog_message(str(read.value))
    with pytest.raises(ConfigError) as changes:
        icesink.changes(TABLE, None, catalog={"name": "prdo"})
    assert_undefined_catalog_message(str(changes.value))
    assert_nothing_created(tmp_path)


def test_the_error_names_the_pyiceberg_yaml_that_defines_the_catalogs(
    user_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "pyiceberg-home"
    home.mkdir()
    (home / ".pyiceberg.yaml").write_text(
        "catalog:\n  lake:\n    type: sql\n    uri: sqlite:////nonexistent/c.db\n    warehouse: file:///nonexistent\n"
    )
    with pytest.raises(ConfigError) as raised:
        CatalogConfig.resolve("laek")
    message = str(raised.value)
    assert "catalog 'laek' is not defined; defined catalogs: 'lake', 'prod'" in message
    assert str(home / ".pyiceberg.yaml") in message
    assert CatalogConfig.resolve("LAKE").uri == "sqlite:////nonexistent/c.db"  # names are case-insensitive


def test_a_name_with_an_explicit_uri_is_only_a_label(user_dir: Path, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'labelled' / 'catalog.db'}"
    warehouse = file_uri(tmp_path / "labelled")
    result = CliRunner().invoke(
        main, ["--catalog", "anything", "--uri", uri, "--warehouse", warehouse, "db", "upgrade"]
    )
    assert result.exit_code == 0, result.output
    assert "catalog 'anything'" in result.output
    config = CatalogConfig.resolve("anything", uri=uri, warehouse=warehouse)
    assert (config.name, config.uri) == ("anything", uri)


def test_the_embedded_default_needs_no_name_or_the_default_one(user_dir: Path) -> None:
    assert CatalogConfig.resolve().embedded
    assert CatalogConfig.resolve("default").embedded  # the name the embedded catalog reports itself by
    assert not (user_dir / "warehouse").exists()  # resolving creates nothing; first use does


def test_a_catalog_with_settings_but_no_uri_is_refused(user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__S3__ENDPOINT", "http://127.0.0.1:9000")
    with pytest.raises(ConfigError, match=r"catalog 'lake' has settings \(s3.endpoint\) but no uri"):
        CatalogConfig.resolve("lake")
    with pytest.raises(ConfigError, match="but no uri"):
        icesink.read(TABLE, catalog={"s3.endpoint": "http://127.0.0.1:9000"})  # was: the embedded default
    assert not (user_dir / "warehouse").exists()


# --- 2, 3. The change stream's starting position and options (without Spark: the options as Spark passes them)


def test_starting_takes_exactly_the_documented_forms() -> None:
    from icesink.changelog.source import ReadOptions, Starting

    def starting(text: str) -> Starting:
        return ReadOptions.of({"table": TABLE, "starting": text}).starting

    assert starting("earliest") == Starting("earliest") and starting(" Latest ") == Starting("latest")
    assert starting("1234567890123456789") == Starting("snapshot", 1234567890123456789)
    assert starting("123") == Starting("snapshot", 123)  # digits are always a snapshot id, never a time
    assert starting("2026-11-23T10:00:00") == Starting("time", 1795428000000)  # no zone: UTC
    assert starting("2026-11-23T10:00:00.5Z") == Starting("time", 1795428000500)
    assert starting("2026-11-23T12:00:00+02:00") == Starting("time", 1795428000000)
    assert ReadOptions.of({"table": TABLE}).starting == Starting("earliest")


@pytest.mark.parametrize("value", ["yesterday", "1.7e12", "", "2026-13-01", "now"])
def test_any_other_starting_is_refused_naming_the_value_and_the_forms(value: str) -> None:
    from icesink.changelog.source import ReadOptions

    with pytest.raises(ConfigError) as raised:
        ReadOptions.of({"table": TABLE, "starting": value})
    message = str(raised.value)
    assert f"starting={value!r}" in message
    assert "earliest, latest, a snapshot id" in message and "ISO 8601" in message


def test_unknown_change_stream_options_are_refused_with_the_closest_known_one() -> None:
    from icesink.changelog.source import ReadOptions

    with pytest.raises(ConfigError) as raised:
        ReadOptions.of({"table": TABLE, "startng": "latest"})
    message = str(raised.value)
    assert "unknown option 'startng'" in message and "did you mean 'starting'?" in message
    assert "max-files-per-trigger" in message  # the known options are listed
    with pytest.raises(ConfigError, match="did you mean 'max-files-per-trigger'"):
        ReadOptions.of({"table": TABLE, "max_files_per_trigger": "1"})
    with pytest.raises(ConfigError, match="mode='changes' must be one of changelog, append"):
        ReadOptions.of({"table": TABLE, "mode": "changes"})
    with pytest.raises(ConfigError, match="name different tables"):
        ReadOptions.of({"table": TABLE, "path": "shop.other"})
    # What Spark itself passes, and Spark's internal options, are not the user's to misspell.
    options = ReadOptions.of({"path": TABLE, "catalog.uri": "sqlite://", "__internal": "x", "queryname": "q"})
    assert options.table == TABLE


# --- 4. Values out of range -----------------------------------------------------------------------------------

OUT_OF_RANGE = [
    (["maintain", TABLE, "--lease-ttl", "-5"], "--lease-ttl"),
    (["maintain", TABLE, "--lease-ttl", "0"], "--lease-ttl"),
    (["maintain", TABLE, "--lease-ttl", "nan"], "--lease-ttl"),
    (["committer", "run", "--once", "--poll-interval", "-1"], "--poll-interval"),
    (["committer", "run", "--once", "--poll-interval", "0"], "--poll-interval"),
    (["committer", "run", "--once", "--lease-ttl", "-1"], "--lease-ttl"),
    (["committer", "run", "--once", "--poll-interval", "20"], "is not below --lease-ttl"),
    (["committer", "run", "--once", "--metrics-port", "65536"], "--metrics-port"),
    (["committer", "run", "--once", "--metrics-port", "-1"], "--metrics-port"),
    (["committer", "run", "--once", "--max-failures", "0"], "--max-failures"),
    (["committer", "run", "--once", "--wait", "-1"], "--wait"),
    (["committer", "run", "--once", "--wait", "inf"], "--wait"),
    (["committer", "run", "--wait", "30"], "applies with --once"),
    (["committer", "gc", "--older-than", "0s"], "under a minute"),
    (["committer", "gc", "--older-than", "59s"], "under a minute"),
    (["committer", "gc", "--older-than", "-1d"], "is not an age"),
    (["checkpoints", "list", TABLE, "--limit", "-1"], "--limit"),
    (["scan", TABLE, "--limit", "-1"], "--limit"),
    (["scan", TABLE, "--limit", "-20"], "--limit"),
    (["changes", TABLE, "--limit", "-1"], "--limit"),
]


@pytest.mark.parametrize(("arguments", "says"), OUT_OF_RANGE, ids=[" ".join(a) for a, _ in OUT_OF_RANGE])
def test_cli_values_out_of_range_are_usage_errors_before_the_catalog_is_opened(
    tmp_path: Path, arguments: list[str], says: str
) -> None:
    database = tmp_path / "catalog.db"
    base = ["--uri", f"sqlite:///{database}", "--warehouse", file_uri(tmp_path / "warehouse")]
    result = CliRunner().invoke(main, [*base, *arguments])
    assert result.exit_code == 2, result.output
    last = result.output.splitlines()[-1]
    assert last.startswith("Error: Invalid value for") and says in last, result.output
    assert files_under(tmp_path) == []  # no database, no warehouse


def test_out_of_range_values_from_the_environment_are_refused_too(tmp_path: Path) -> None:
    base = ["--uri", f"sqlite:///{tmp_path / 'catalog.db'}", "--warehouse", file_uri(tmp_path)]
    result = CliRunner(env={"ICESINK_LEASE_TTL": "-5"}).invoke(main, [*base, "committer", "run", "--once"])
    assert result.exit_code == 2 and "ICESINK_LEASE_TTL" in result.output and "-5" in result.output
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(
    ("prop", "value", "allowed"),
    [
        ("icesink.maintain.min-input-files", "0", "2 or more"),
        ("icesink.maintain.max-group-bytes", "-1", "1 or more"),
        ("icesink.maintain.min-file-ratio", "1.5", "from 0 to 1"),
        ("icesink.maintain.delete-file-threshold", "0", "1 or more"),
        ("icesink.maintain.max-seconds", "-1", "from 0 to 86400"),
    ],
)
def test_maintain_refuses_an_out_of_range_table_property_naming_it_and_changes_nothing(
    catalog_config: CatalogConfig, prop: str, value: str, allowed: str
) -> None:
    table = create_orders_table(catalog_config)
    with table.transaction() as change:
        change.set_properties({prop: value})
    before = open_catalog(catalog_config).load_table(TABLE).metadata_location
    base = ["--catalog", catalog_config.name, "--uri", catalog_config.uri, "--warehouse", catalog_config.warehouse]
    result = CliRunner().invoke(main, [*base, "maintain", TABLE, "--all"])
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: table {TABLE}: table property {prop}={value!r} is out of range")
    assert f"must be {allowed}" in line
    assert open_catalog(catalog_config).load_table(TABLE).metadata_location == before


def test_every_numeric_maintenance_property_has_a_range() -> None:
    from dataclasses import fields

    from icesink.maintenance.policy import PROPERTY_NAMES, RANGES, MaintenancePolicy

    for f in fields(MaintenancePolicy):
        if f.type != "bool":
            assert f.name in RANGES, f"{PROPERTY_NAMES[f.name]} has no allowed range"
            low = RANGES[f.name][0]
            assert MaintenancePolicy.of({PROPERTY_NAMES[f.name]: str(low)}, TABLE) is not None
            with pytest.raises(ConfigError, match="out of range"):
                MaintenancePolicy.of({PROPERTY_NAMES[f.name]: str(low - 1)}, TABLE)


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("table_properties", ["a=b"], "a dict of names to values"),
        ("op_values", "IUD", "a dict of names to values"),
        ("sequence_by", ["ts"], "a string"),
        ("trigger", "availableNow", "a dict"),
        ("query_name", 7, "a string"),
        ("checkpoint_location", 42, "a string"),
        ("job_id", 123, "a string"),
        ("partition_by", [1], "a list of strings"),
        ("equality_fields", "id", "a list of strings, e.g. ['id']"),
        ("catalog", 5, "a catalog name, a CatalogConfig or a dict of properties"),
    ],
)
def test_an_option_of_the_wrong_kind_is_refused_naming_the_table_and_the_option(
    option: str, value: object, said: str
) -> None:
    """Not a Python error from deep inside (an unhashable list, a string split into letters, an int quoted)."""
    from icesink.sink.options import StreamOptions

    with pytest.raises(ConfigError) as refused:
        StreamOptions(table=TABLE, **{option: value})
    assert str(refused.value).startswith(f"table {TABLE}: {option} takes {said}")
    assert refused.value.table == TABLE


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"partition_by": "day(ts)"}, "partition_by takes a dict by source table (or table)"),
        ({"tables": ["a"]}, "tables takes a dict by source table (or table)"),
        ({"table_properties": ["a"]}, "table_properties takes a dict of names to values"),
    ],
)
def test_icesink_debezium_refuses_an_option_of_the_wrong_kind(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"icesink.debezium: {message}")):
        icesink.debezium("inventory", **arguments)  # type: ignore[arg-type]
    assert icesink.debezium("inventory", tables={"a.b": "x.y"}).tables == {"a.b": "x.y"}


def test_partition_by_given_as_one_string_is_refused_naming_the_list_it_meant() -> None:
    """A string is a sequence of its characters: ``partition_by="region"`` would partition by columns r, e, g…"""
    from icesink.sink.options import StreamOptions

    with pytest.raises(ConfigError) as refused:
        StreamOptions(table=TABLE, partition_by="day(ts)")  # type: ignore[arg-type]
    assert str(refused.value) == (
        f"table {TABLE}: partition_by takes a list of strings, e.g. ['day(ts)'], not the string 'day(ts)'"
    )
    assert refused.value.table == TABLE
    assert StreamOptions(table=TABLE, partition_by=["day(ts)"]).partition_by == ("day(ts)",)


# --- 4b. icesink.* table property names ---------------------------------------------------------------------


def test_a_misspelt_icesink_table_property_is_refused_naming_the_table_and_the_nearest_name(tmp_path: Path) -> None:
    from icesink.sink.options import StreamOptions

    with pytest.raises(ConfigError) as refused:
        StreamOptions(
            table=TABLE, table_properties={"write.format.default": "parquet", "icesink.write.max-open-file": "4"}
        )
    message = str(refused.value)
    assert message.startswith(f"table {TABLE}: table_properties holds unknown icesink table property ")
    assert "'icesink.write.max-open-file' (did you mean 'icesink.write.max-open-files'?)" in message
    assert "stored and never applied" in message
    with pytest.raises(ConfigError, match=r"did you mean 'icesink\.maintain\.min-commits'"):
        StreamOptions(table=TABLE, table_properties={"icesink.maintenance.min-commits": "3"})
    with pytest.raises(ConfigError, match=r"the known ones: icesink\.write\.max-open-files, "):
        StreamOptions(table=TABLE, table_properties={"icesink.colour": "blue"})
    # icesink.debezium takes them for every table it creates: refused when it is called.
    with pytest.raises(ConfigError) as refused:
        icesink.debezium("inventory", table_properties={"icesink.equality-deletes.convert-at-comit": "false"})
    assert str(refused.value).startswith("icesink.debezium: table_properties holds unknown icesink table property")
    assert "did you mean 'icesink.equality-deletes.convert-at-commit'?" in str(refused.value)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("icesink.max-committed-checkpoint-id.orders", "icesink writes it at every commit"),
        ("icesink.stream-id.orders", "icesink writes it at every commit"),
        ("icesink.job-id", "which icesink writes into snapshot summaries, not a table property it reads"),
    ],
)
def test_the_names_icesink_writes_itself_are_refused_as_table_properties(name: str, says: str) -> None:
    from icesink.sink.options import StreamOptions

    with pytest.raises(ConfigError) as refused:
        StreamOptions(table=TABLE, table_properties={name: "7"})
    assert str(refused.value).startswith(f"table {TABLE}: ") and repr(name) in str(refused.value)
    assert says in str(refused.value)
    with pytest.raises(ConfigError, match=re.escape(says)):
        icesink.debezium("inventory", table_properties={name: "7"})


def test_icesinks_own_settings_and_icebergs_properties_are_taken_as_given() -> None:
    from icesink.maintenance.policy import PROPERTY_NAMES
    from icesink.sink.options import StreamOptions

    given = {name: "1" for name in PROPERTY_NAMES.values()}
    given |= {"icesink.write.max-open-files": "8", "write.target-file-size-bytes": "1024", "commit.retry.x": "1"}
    assert StreamOptions(table=TABLE, table_properties=given).table_properties == given
    assert icesink.debezium("inventory", table_properties=given).table_options.table_properties == given


def test_a_table_another_tool_gave_an_unknown_icesink_property_is_written_with_a_warning_naming_it(
    catalog_config: CatalogConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream may not own the table: its properties are warned about, never refused."""
    from icesink.sink.preflight import _warn_unknown_properties

    table = create_orders_table(catalog_config)
    with table.transaction() as change:  # pyiceberg, say: no check of icesink's names
        change.set_properties({"icesink.write.max-open-file": "4", "icesink.max-committed-checkpoint-id.j": "1"})
    table = open_catalog(catalog_config).load_table(TABLE)
    with caplog.at_level("WARNING", logger="icesink.stream"):
        _warn_unknown_properties(table, TABLE)
    (record,) = caplog.records
    assert record.getMessage().startswith(
        f"table {TABLE}: its properties hold unknown icesink table property 'icesink.write.max-open-file' "
        "(did you mean 'icesink.write.max-open-files'?); icesink does not read it"
    )


# --- 5. Concurrent migrations -----------------------------------------------------------------------------------


def test_concurrent_db_upgrades_wait_for_each_other_and_all_succeed(empty_database: str, tmp_path: Path) -> None:
    from icesink import migrations
    from icesink.catalog import database

    command = [sys.executable, "-m", "icesink.cli", "--uri", empty_database, "--warehouse", file_uri(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.Popen([*command, "db", "upgrade"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err.decode()
        assert f"is at schema revision {migrations.head_revision()}" in out.decode()
    config = CatalogConfig("check", empty_database, file_uri(tmp_path))
    database.ensure_migrated(config)
    assert migrations.current_revision(database.engine(config)) == migrations.head_revision()
    database.dispose_engines()
