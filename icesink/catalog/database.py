"""The catalog database: engines, the migration check, and translation of driver errors.

This is the one place where SQLAlchemy exceptions become icesink errors.
"""

from __future__ import annotations

import contextlib
import datetime
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, overload

from sqlalchemy import create_engine, event, exc

from icesink import migrations
from icesink.catalog.config import CatalogConfig, redact_uri, sqlite_path
from icesink.errors import CatalogNotMigratedError, CatalogReplacedError, CatalogUnavailableError, ConfigError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


@contextlib.contextmanager
def database_errors(config: CatalogConfig) -> Iterator[None]:
    """Translate driver errors: lost connections are transient, the rest pass through."""

    try:
        yield
    except (exc.OperationalError, exc.InterfaceError, exc.DisconnectionError, exc.TimeoutError) as e:
        if _contended(e):
            raise CatalogUnavailableError(
                f"{config.describe()} was busy: another transaction held what this one needed "
                f"({_first_line(e)}); nothing of this one was kept, and it is tried again"
            ) from e
        raise CatalogUnavailableError(
            f"{config.describe()} is unreachable or dropped the connection: {_first_line(e)}"
        ) from e
    except exc.NoSuchModuleError as e:
        raise ConfigError(f"{config.describe()}: no database driver for this URL ({_first_line(e)})") from e


@overload
def as_utc(value: datetime.datetime) -> datetime.datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: datetime.datetime | None) -> datetime.datetime | None:
    """A time read back from the database, as an aware UTC datetime.

    SQLite hands back naive datetimes; every time icesink writes is in UTC.
    """
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    return value


# PostgreSQL's deadlock_detected, serialization_failure and lock_not_available: the server rolled the
# transaction back because of another one, not because it went away.
_CONTENTION_CODES = ("40P01", "40001", "55P03")


def _contended(error: BaseException) -> bool:
    """Whether the database refused a transaction because of another one (a deadlock, a lock it waited for)."""
    original = getattr(error, "orig", None)
    return getattr(original, "pgcode", None) in _CONTENTION_CODES or "database is locked" in str(original or error)


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "orig", None) or error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def engine(config: CatalogConfig) -> Engine:
    """One pooled engine per database URL and process."""

    with _lock:
        existing = _engines.get(config.uri)
        if existing is not None:
            return existing
        database_file = sqlite_path(config.uri)
        with database_errors(config):
            created = create_engine(config.uri, pool_pre_ping=True, **_engine_options(config.uri))
        if config.uri.startswith("sqlite"):
            _use_write_ahead_log(created)
        if database_file is not None:
            _watch_database_file(created, config, database_file)
        _engines[config.uri] = created
        return created


# SQLite files by URI: the file's path (resolved once: a later chdir must not move it) and the
# (device, inode) this process's connections opened.
_paths: dict[str, Path] = {}
_files: dict[str, tuple[int, int]] = {}


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _watch_database_file(created: Engine, config: CatalogConfig, path: Path) -> None:
    """Every new connection must open the same file as the first one did.

    SQLite creates a missing database file on connect, and connections opened
    before a file was deleted or replaced go on writing into the old one: both
    would commit where no one else looks.
    """

    _paths[config.uri] = path

    @event.listens_for(created, "do_connect")
    def _still_there(_dialect, _record, _args, _kwargs) -> None:  # type: ignore[no-untyped-def]
        # Connecting would create an empty database where the catalog used to be.
        if config.uri in _files and _file_identity(path) is None:
            raise _replaced(config, path, missing=True)

    @event.listens_for(created, "connect")
    def _same_file(_connection, _record) -> None:  # type: ignore[no-untyped-def]
        identity = _file_identity(path)
        expected = _files.setdefault(config.uri, identity) if identity is not None else None
        if identity is None or identity != expected:
            raise _replaced(config, path, identity is None)

    @event.listens_for(created, "checkout")
    def _still_the_same_file(_connection, _record, _proxy) -> None:  # type: ignore[no-untyped-def]
        # Every use of a pooled connection, reads included: one stat() call.
        check_database(config)


def _replaced(config: CatalogConfig, path: Path, missing: bool) -> CatalogReplacedError:
    what = "was deleted" if missing else "was replaced by another file"
    return CatalogReplacedError(
        f"{config.describe()}: the database file {path} {what} while this process was using it; nothing more is "
        "committed or staged through it. Restore the file from a backup (or point the catalog at the right "
        "database) and restart; checkpoints not in the catalog are written again from Spark's checkpoint"
    )


def check_database(config: CatalogConfig) -> None:
    """The catalog database is still the one this process opened (checked on every connection checkout).

    For SQLite, the file at the configured path must be the file the pooled
    connections write into; otherwise :class:`CatalogReplacedError` (terminal).
    """
    path = _paths.get(config.uri)
    if path is None:
        return
    expected = _files.get(config.uri)
    if expected is None:
        return  # no connection yet: the next one will record the file
    identity = _file_identity(path)
    if identity != expected:
        raise _replaced(config, path, identity is None)


def _use_write_ahead_log(created: Engine) -> None:
    """SQLite in WAL mode: readers and the one writer no longer block each other.

    In SQLite's default rollback journal, a process that stops while reading
    (a paused committer, a frozen VM) keeps every other process from
    committing, and a writer waiting for it keeps everyone from reading. The
    mode is stored in the database file; a database that cannot switch (in
    memory, busy) stays as it is.
    """

    @event.listens_for(created, "connect")
    def _journal_mode(connection, _record) -> None:  # type: ignore[no-untyped-def]

        with contextlib.suppress(sqlite3.OperationalError):
            connection.execute("PRAGMA journal_mode=WAL").fetchall()


def _engine_options(uri: str) -> dict[str, object]:
    if uri.startswith("sqlite"):
        # Writers, the committer and the CLI may share one SQLite file; wait for locks
        # rather than failing at once.
        return {"connect_args": {"timeout": 30}}
    return {}


def dispose_engines() -> None:
    """Close pooled connections (tests, and processes that fork)."""
    with _lock:
        for created in _engines.values():
            created.dispose()
        _engines.clear()
        _files.clear()
        _paths.clear()


def upgrade(config: CatalogConfig) -> None:
    """Apply icesink's migrations (``icesink db upgrade``)."""

    database_file = sqlite_path(config.uri)
    if database_file is not None:  # creating the catalog is this command's job, its directory included
        database_file.parent.mkdir(parents=True, exist_ok=True)
    with database_errors(config):
        migrations.upgrade(engine(config))


def upgrade_on_first_use(config: CatalogConfig) -> None:
    """The embedded catalog, created and migrated by whichever process uses it first. One query where it is at
    icesink's latest migration already: running alembic costs every process (each CLI command) half a second."""

    database_file = sqlite_path(config.uri)
    if database_file is not None and database_file.exists():
        with database_errors(config):
            if migrations.current_revision(engine(config)) == migrations.HEAD:
                return
    upgrade(config)


def ensure_migrated(config: CatalogConfig) -> None:
    """Fail with instructions unless the database is at icesink's latest migration."""

    refuse_missing_file(config)
    with database_errors(config):
        current = migrations.current_revision(engine(config))
    head = migrations.HEAD
    if current == head:
        return
    if current is not None and current not in migrations.revisions():
        raise CatalogNotMigratedError(
            f"{config.describe()} is at schema revision {current}, which a later icesink release made (this one "
            f"is at {head}); upgrade icesink, or take the schema back with that release: `icesink db downgrade {head}`"
        )
    state = "has no icesink schema" if current is None else f"is at schema revision {current}, not {head}"
    raise CatalogNotMigratedError(
        f"{config.describe()} {state}; run `icesink db upgrade` "
        f"(with the same catalog settings, e.g. --uri {redact_uri(config.uri)!r}) and start again"
    )


def refuse_missing_file(config: CatalogConfig) -> None:
    """An SQLite catalog whose file does not exist is an error: connecting would create an empty one."""
    database_file = sqlite_path(config.uri)
    if database_file is not None and config.uri not in _files and not database_file.exists():
        # (A file that vanishes under an open engine is CatalogReplacedError's case.)
        raise CatalogNotMigratedError(
            f"{config.describe()}: the database file {database_file} does not exist; check the uri, or create the "
            f"catalog with `icesink --uri {redact_uri(config.uri)!r} db upgrade`"
        )
