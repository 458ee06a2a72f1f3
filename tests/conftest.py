"""Shared fixtures: one Spark session per test session, catalogs on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

# Spark's Python workers must run this interpreter; the setting is read when the session starts.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Tests never read the developer's own ~/.pyiceberg.yaml.
os.environ["PYICEBERG_HOME"] = str(Path(__file__).parent / "no-pyiceberg-home")

from icesink.catalog.config import CatalogConfig
from icesink.paths import file_uri

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
        config = CatalogConfig(name=name, uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=file_uri(warehouse))
        database.upgrade(config)
        return config
    url = request.getfixturevalue("pg_database")
    return CatalogConfig(name=name, uri=url, warehouse=file_uri(warehouse))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog_config(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogConfig:
    """A migrated catalog on SQLite or PostgreSQL, with a warehouse in a fresh directory."""
    return _catalog(request, tmp_path, request.param)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database no one migrated: SQLite, and PostgreSQL where there is one."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    admin = request.getfixturevalue("pg_admin_url")
    url = create_pg_database(admin)
    yield url
    drop_pg_database(admin, url)


@pytest.fixture
def own_catalog(empty_database: str, tmp_path: Path) -> CatalogConfig:
    """A migrated catalog in a database of its own (for tests that rewrite every ledger row or the schema)."""
    from icesink.catalog import database
    from icesink.paths import file_uri

    config = CatalogConfig("main", empty_database, file_uri(tmp_path / "warehouse"))
    database.upgrade(config)
    return config


@pytest.fixture
def pg_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogConfig:
    """A migrated PostgreSQL catalog: the production shape, for the slowest fault-injection cases."""
    return _catalog(request, tmp_path, "postgres")


@pytest.fixture
def sqlite_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogConfig:
    """A migrated SQLite catalog, for Spark tests whose subject is not the catalog database."""
    return _catalog(request, tmp_path, "sqlite")


JAVA_READER_VENV = Path(__file__).parent.parent / ".venv-iceberg-java"


@pytest.fixture(scope="session")
def java_reader() -> Path:
    """The Python of the separate environment holding Iceberg Java (see ``make install-interop``)."""
    python = JAVA_READER_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{JAVA_READER_VENV} is missing: `make install-interop` installs pyspark 3.5.9 + Iceberg 1.9.2")
    return python


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local[2] Spark session for the whole test session."""
    from tests.helpers.streams import local_session

    session = local_session(app_name="icesink-tests", **{"spark.driver.memory": "1g"})
    yield session
    session.stop()


# `make test` runs the suite in two processes (pytest-xdist), each handed one test at a time, except the tests
# of these files, which share what they compute once per process (the built site; the histories' ends, which
# Iceberg Java reads in one JVM): each file's tests go to one process, the first work handed out.
ONE_PROCESS_FILES = ("tests/test_docs.py", "tests/test_histories.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return file if file in ONE_PROCESS_FILES else nodeid

    return Scheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """The end states a test phase checked travel with its report (from a worker process to the controller)."""
    from tests.helpers.outcomes import REPORT_PROPERTY, take_unreported

    made = yield
    outcomes = take_unreported()
    if outcomes:
        made.get_result().user_properties.append((REPORT_PROPERTY, outcomes))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault-injection (and S3, cluster) cases and their verified end states, as one table."""
    from tests.helpers.outcomes import REPORT_PROPERTY, Outcome, format_outcomes

    reports = [report for reports in terminalreporter.stats.values() for report in reports]
    outcomes = [
        Outcome(**outcome)
        for report in reports
        for name, value in getattr(report, "user_properties", ())
        if name == REPORT_PROPERTY
        for outcome in value
    ]
    if outcomes:
        terminalreporter.section("end states of the fault, soak, S3 and cluster cases (read back with iceberg-rust)")
        terminalreporter.write_line(format_outcomes(outcomes))


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Test credentials for the loopback S3 server; tests check that the secret shows up nowhere.
S3_ACCESS_KEY = "icesink-test-key"
S3_SECRET = "s3cr3t-must-never-be-printed"


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, for the whole session.

    In its own process rather than a thread of this one: iceberg-rust keeps the
    GIL while it waits for its reads, so a server thread here could never answer.
    """
    import socket
    import subprocess
    import time

    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "ab")  # noqa: SIM115 - open for the server's life
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"moto's S3 server did not start on 127.0.0.1:{port}")
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(10)
    log.close()


def s3_properties(endpoint: str) -> dict[str, str]:
    return {
        "s3.endpoint": endpoint,
        "s3.access-key-id": S3_ACCESS_KEY,
        "s3.secret-access-key": S3_SECRET,
        "s3.region": "us-east-1",
    }


@pytest.fixture
def s3_catalog(request: pytest.FixtureRequest, tmp_path: Path, s3_endpoint: str) -> CatalogConfig:
    """A PostgreSQL catalog whose warehouse is a fresh bucket on the loopback S3 server."""
    import pyarrow.fs as pafs

    bucket = f"lake-{uuid.uuid4().hex[:8]}"
    s3 = pafs.S3FileSystem(
        access_key=S3_ACCESS_KEY,
        secret_key=S3_SECRET,
        region="us-east-1",
        scheme="http",
        endpoint_override=s3_endpoint.removeprefix("http://"),
        allow_bucket_creation=True,
    )
    s3.create_dir(bucket)
    url = request.getfixturevalue("pg_database")
    # No underscore in the name: pyiceberg reads PYICEBERG_CATALOG__<NAME>__* with "_" meaning "-".
    name = f"lake{uuid.uuid4().hex[:8]}"
    return CatalogConfig(
        name=name, uri=url, warehouse=f"s3://{bucket}/warehouse", properties=s3_properties(s3_endpoint)
    )
