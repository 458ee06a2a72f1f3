"""Shared fixtures: one Spark session per test session, catalogs on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# Spark's Python workers must run this interpreter; the setting is read when the session starts.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Tests never read the developer's own ~/.pyiceberg.yaml.
os.environ["PYICEBERG_HOME"] = str(Path(__file__).parent / "no-pyiceberg-home")

from icesink.catalog.config import CatalogConfig

PG_URL = os.environ.get("ICESINK_TEST_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("ICESINK_REQUIRE_PG") == "1"


def _pg_problem() -> str | None:
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(PG_URL)
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as e:  # any failure means "no usable PostgreSQL here"
        return f"PostgreSQL at {PG_URL} is not reachable: {str(e).splitlines()[0]}"
    return None


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    problem = _pg_problem()
    if problem:
        if REQUIRE_PG:
            pytest.fail(f"{problem} (ICESINK_REQUIRE_PG=1 makes this a failure)")
        pytest.skip(problem)
    return PG_URL


def create_pg_database(admin_url: str) -> str:
    """A new, empty PostgreSQL database; returns its URL."""
    import sqlalchemy as sa

    name = f"icesink_test_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return str(sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False))


def drop_pg_database(admin_url: str, url: str) -> None:
    import sqlalchemy as sa

    from icesink.catalog.database import dispose_engines

    dispose_engines()
    name = sa.engine.make_url(url).database
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


@pytest.fixture(scope="session")
def pg_database(pg_admin_url: str) -> Iterator[str]:
    """One migrated PostgreSQL database for the session; tests keep apart by catalog name."""
    from icesink.catalog import database

    url = create_pg_database(pg_admin_url)
    database.upgrade(CatalogConfig(name="setup", uri=url, warehouse="file:///unused"))
    yield url
    drop_pg_database(pg_admin_url, url)


def _catalog(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> CatalogConfig:
    from icesink.catalog import database

    warehouse = (tmp_path / "warehouse").absolute()
    warehouse.mkdir()
    name = f"cat_{uuid.uuid4().hex[:8]}"
    if kind == "sqlite":
        config = CatalogConfig(name=name, uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri())
        database.upgrade(config)
        return config
    url = request.getfixturevalue("pg_database")
    return CatalogConfig(name=name, uri=url, warehouse=warehouse.as_uri())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog_config(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogConfig:
    """A migrated catalog on SQLite or PostgreSQL, with a warehouse in a fresh directory."""
    return _catalog(request, tmp_path, request.param)


@pytest.fixture
def pg_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogConfig:
    """A migrated PostgreSQL catalog: the production shape, for the slowest fault-injection cases."""
    return _catalog(request, tmp_path, "postgres")


@pytest.fixture
def sqlite_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogConfig:
    """A migrated SQLite catalog, for Spark tests whose subject is not the catalog database."""
    return _catalog(request, tmp_path, "sqlite")


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local[2] Spark session for the whole test session."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("icesink-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
