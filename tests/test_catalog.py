"""Catalog configuration and the migrated schema, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from icesink.catalog import database
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.errors import CatalogNotMigratedError, CatalogUnavailableError, ConfigError
from icesink.paths import file_uri


def test_nothing_configured_means_the_embedded_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = CatalogConfig.resolve()
    assert config.embedded
    assert config.uri == f"sqlite:///{tmp_path / 'warehouse' / 'catalog.db'}"
    assert config.warehouse == file_uri(tmp_path / "warehouse")
    catalog = open_catalog(config)  # created and migrated on first use
    catalog.create_namespace("demo")
    assert (tmp_path / "warehouse" / "catalog.db").exists()


def test_the_embedded_catalog_behind_this_release_is_migrated_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening it at the latest migration runs no migration; behind it (made by an earlier release), it is brought
    up to date, its rows kept."""
    from icesink import migrations

    monkeypatch.chdir(tmp_path)
    config = CatalogConfig.resolve()
    open_catalog(config).create_namespace("kept")
    earlier = migrations.revisions()[-2]
    migrations.downgrade(database.engine(config), earlier)
    assert migrations.current_revision(database.engine(config)) == earlier
    catalog = open_catalog(config)
    assert migrations.current_revision(database.engine(config)) == migrations.HEAD
    assert ("kept",) in catalog.list_namespaces()
    ran: list[str] = []
    monkeypatch.setattr(migrations, "upgrade", lambda engine, revision="head": ran.append(revision))
    open_catalog(config).list_namespaces()
    assert ran == []  # at the latest migration already: one query, no alembic


def test_pyiceberg_environment_variables_configure_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__URI", "postgresql+psycopg2://icesink:s3cret@db:5432/catalog")
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__WAREHOUSE", "s3://lake/warehouse")
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__S3__ENDPOINT", "http://127.0.0.1:9000")
    config = CatalogConfig.resolve("prod")
    assert not config.embedded
    assert config.uri.endswith("@db:5432/catalog")
    assert config.warehouse == "s3://lake/warehouse"
    assert config.properties["s3.endpoint"] == "http://127.0.0.1:9000"
    assert "s3cret" not in config.describe()
    assert config.pyiceberg_properties()["init_catalog_tables"] == "false"


def test_pyiceberg_yaml_configures_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".pyiceberg.yaml").write_text(
        "catalog:\n  lake:\n    type: sql\n    uri: sqlite:////data/catalog.db\n    warehouse: file:///data/wh\n"
    )
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    config = CatalogConfig.resolve("lake")
    assert (config.uri, config.warehouse) == ("sqlite:////data/catalog.db", "file:///data/wh")
    assert CatalogConfig.resolve("lake", warehouse="file:///elsewhere").warehouse == "file:///elsewhere"


def test_non_sql_catalog_type_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__REST__TYPE", "rest")
    monkeypatch.setenv("PYICEBERG_CATALOG__REST__URI", "http://127.0.0.1:8181")
    with pytest.raises(ConfigError, match="type 'rest'"):
        CatalogConfig.resolve("rest")


def test_bad_uri_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="not a database URL"):
        CatalogConfig.resolve("x", uri="not a url at all", warehouse="file:///tmp/w")


def test_unknown_driver_is_a_config_error(tmp_path: Path) -> None:
    config = CatalogConfig("x", "nosuchdb://host/db", file_uri(tmp_path))
    with pytest.raises(ConfigError, match="no database driver"):
        open_catalog(config)


def test_unreachable_database_is_transient_and_hides_the_password(tmp_path: Path) -> None:
    config = CatalogConfig("x", "postgresql+psycopg2://u:hunter2@127.0.0.1:1/db", file_uri(tmp_path))
    with pytest.raises(CatalogUnavailableError) as raised:
        open_catalog(config)
    assert raised.value.transient
    assert "hunter2" not in str(raised.value)


def test_unmigrated_database_says_to_run_db_upgrade(empty_database: str, tmp_path: Path) -> None:
    config = CatalogConfig("main", empty_database, file_uri(tmp_path))
    with pytest.raises(CatalogNotMigratedError, match=r"icesink (--uri .+ )?db upgrade"):
        open_catalog(config)
    database.upgrade(config)
    database.upgrade(config)  # idempotent
    catalog = open_catalog(config)
    catalog.create_namespace("ns")
    assert ("ns",) in catalog.list_namespaces()


def test_database_initialised_by_pyiceberg_keeps_its_tables(empty_database: str, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    plain = SqlCatalog("main", uri=empty_database, warehouse=file_uri(tmp_path))
    plain.create_namespace("existing")
    plain.engine.dispose()
    config = CatalogConfig("main", empty_database, file_uri(tmp_path))
    database.upgrade(config)
    assert ("existing",) in open_catalog(config).list_namespaces()


def test_a_transaction_refused_for_another_one_is_said_to_be_contention_not_an_outage(
    catalog_config: CatalogConfig,
) -> None:
    """A SQLite database locked by another writer, or a PostgreSQL deadlock: transient, and said as such."""
    import threading

    import sqlalchemy as sa

    from icesink.catalog.database import database_errors

    table = f"contention_{catalog_config.name}"
    engine = sa.create_engine(
        catalog_config.uri, **({"connect_args": {"timeout": 0.2}} if "sqlite" in catalog_config.uri else {})
    )
    with engine.begin() as connection:
        connection.execute(sa.text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v INTEGER)"))
        connection.execute(sa.text(f"INSERT INTO {table} VALUES (1, 0), (2, 0)"))
    errors: list[BaseException] = []

    def update(first: int, second: int, both_hold: threading.Barrier) -> None:
        try:
            with database_errors(catalog_config), engine.begin() as connection:
                connection.execute(sa.text(f"UPDATE {table} SET v = v + 1 WHERE id = {first}"))
                both_hold.wait(5)
                connection.execute(sa.text(f"UPDATE {table} SET v = v + 1 WHERE id = {second}"))
        except CatalogUnavailableError as e:
            errors.append(e)

    both_hold = threading.Barrier(2)
    if "sqlite" in catalog_config.uri:  # another writer holds the database: this one's write waits, then gives up
        with engine.begin() as holder:
            holder.execute(sa.text(f"UPDATE {table} SET v = 1 WHERE id = 1"))
            update(2, 2, threading.Barrier(1))
    else:  # two transactions each hold a row the other wants: PostgreSQL breaks the deadlock by refusing one
        threads = [threading.Thread(target=update, args=(*pair, both_hold)) for pair in ((1, 2), (2, 1))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    engine.dispose()
    (error,) = errors
    assert error.transient
    assert "was busy: another transaction held what this one needed" in str(error)
    assert "unreachable" not in str(error)
