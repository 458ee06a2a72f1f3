"""Which tables a checkpoint location's progress belongs to, so that it is never handed to another table.

Spark keeps a stream's progress (the source offsets of every micro-batch it ran) in the checkpoint location,
and knows nothing of where a ``foreachBatch`` sink put the rows. Start a stream into table ``b`` with the
location a stream into table ``a`` used, and Spark carries on after ``a``'s last micro-batch: ``b`` gets only
the rows after it, and the rows before are in ``a`` alone, with nothing said. So icesink writes down, in the
location (``icesink/targets.json``, beside Spark's own files), the tables its micro-batches go to and their
uuids, and a start whose tables are not those is refused while Spark has committed micro-batches there.

A table renamed since is the same table (its uuid); a table of the recorded name but another uuid (dropped
and created again, or another table given the name) is not. A stream of several tables may gain tables (they
start at the next micro-batch, as its routing does), but not be replaced by others. The record is written at
the first micro-batch of each run, so of two queries started on one location only the one Spark runs writes
it. The location is resolved as Spark resolves it (Hadoop's file system for the path, its default file system,
the JVM's working directory); only a location on the driver's disk is checked: one on HDFS or an object store,
or a session without a JVM to ask (Spark Connect), is not.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.catalog.pointers import every_pointer
from icesink.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("icesink.stream")

RECORD = Path("icesink") / "targets.json"
FORMAT = 1


@dataclass(frozen=True)
class Targets:
    """Where a stream's micro-batches go: its tables (identifier → uuid, None where not known yet), or a Debezium
    stream's namespace, whose tables come and go with the source."""

    tables: Mapping[str, str | None]
    debezium_namespace: str | None = None
    locations: Mapping[str, str] = field(default_factory=dict)  # each table's location, to find it renamed
    catalog: str | None = None  # CatalogConfig.describe(): the same names in another catalog are other tables

    def describe(self) -> str:
        """What the stream writes, as a refusal names it."""
        if self.debezium_namespace is not None:
            return f"the Debezium stream into namespace {self.debezium_namespace}"
        names = sorted(self.tables)
        if not names:
            return "no table"
        return f"table {names[0]}" if len(names) == 1 else f"tables {', '.join(names)}"

    def stream(self) -> str:
        """The stream that writes them, as a refusal names it."""
        return self.describe() if self.debezium_namespace is not None else f"a stream into {self.describe()}"

    def encode(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "tables": dict(self.tables),
                "locations": dict(self.locations),
                "debezium_namespace": self.debezium_namespace,
                "catalog": self.catalog,
            },
            sort_keys=True,
        )

    @classmethod
    def of(cls, found: Mapping[str, tuple[str, str] | None], catalog: CatalogConfig) -> Targets:
        """The targets of these tables of ``catalog``, as :func:`table_identities` found them."""
        return cls(
            {name: (f[0] if f else None) for name, f in found.items()},
            locations={name: f[1] for name, f in found.items() if f},
            catalog=catalog.describe(),
        )


def checkpoint_directory(spark: SparkSession, location: str | None) -> Path | None:
    """The directory on this machine's disk that Spark keeps the checkpoint in, resolved as Spark resolves it;
    None where it is elsewhere (HDFS, an object store) or the session has no JVM to ask."""
    if not location:
        return None
    try:
        jvm: Any = spark._jvm
        # The session's own Hadoop settings over the context's, as a streaming query resolves its checkpoint.
        hadoop = spark._jsparkSession.sessionState().newHadoopConf()
        path = jvm.org.apache.hadoop.fs.Path(location)
        qualified = path.getFileSystem(hadoop).makeQualified(path).toUri()
    except Exception as e:  # Spark Connect, or a location Hadoop cannot resolve (Spark will say so itself)
        log.debug(
            "checkpoint location %s: not resolved here (%s); which tables it belongs to is not checked", location, e
        )
        return None
    if str(qualified.getScheme()) != "file":
        return None
    return Path(str(qualified.getPath()))


def _unreadable(location: str, record: Path, problem: object) -> ConfigError:
    return ConfigError(
        f"checkpoint location {location}: icesink's record of the tables it belongs to ({record}) is unreadable "
        f"({problem}); Spark has run micro-batches there, so a start into other tables could not be told apart. "
        "Remove the record to start (the stream writes it anew), after making sure this is the stream that used "
        "the location"
    )


def recorded_targets(directory: Path, location: str) -> Targets | None:
    """The targets written down in a checkpoint directory (None: none there)."""
    record = directory / RECORD
    try:
        text = record.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise _unreadable(location, record, e) from None
    try:
        values = json.loads(text)
        tables, namespace = values["tables"], values.get("debezium_namespace")
        locations, catalog = values.get("locations") or {}, values.get("catalog")
        if not isinstance(tables, dict) or not isinstance(locations, dict):
            raise ValueError("not the shape icesink writes")
        if not all(v is None or isinstance(v, str) for v in (namespace, catalog)):
            raise ValueError("not the shape icesink writes")
        return Targets(
            {str(k): (str(v) if v else None) for k, v in tables.items()},
            namespace,
            {str(k): str(v) for k, v in locations.items()},
            catalog,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise _unreadable(location, record, e) from None


def last_committed_batch(directory: Path) -> int | None:
    """The last micro-batch Spark recorded as done in a checkpoint directory (None: none)."""
    commits = directory / "commits"
    try:
        done = [int(p.name) for p in commits.iterdir() if p.name.isascii() and p.name.isdigit()]
    except OSError:
        return None
    return max(done, default=None)


def refuse_other_targets(df: DataFrame, location: str | None, targets: Targets, config: CatalogConfig | None) -> None:
    """Refused: a start whose ``targets`` would take over the progress another stream's tables made in
    ``location``, or that could not record its own there (a location not on this machine is not checked)."""
    directory = checkpoint_directory(df.sparkSession, location)
    if directory is not None and location is not None:
        refuse_in(directory, location, targets, config)


def refuse_in(directory: Path, location: str, targets: Targets, config: CatalogConfig | None) -> None:
    """:func:`refuse_other_targets` in the checkpoint's ``directory`` on this machine."""
    last = last_committed_batch(directory)
    recorded = recorded_targets(directory, location) if last is not None else None
    moved: dict[str, str] = {}
    if recorded is not None and last is not None and not _continues(recorded, targets, config, location, last, moved):
        renamed = "".join(f" (table {old} is named {new} now)" for old, new in sorted(moved.items()))
        if _other_catalog(recorded, targets):
            renamed += f" in {recorded.catalog} (this stream's: {targets.catalog})"
        raise ConfigError(
            f"{targets.describe()}: checkpoint location {location} holds the progress of "
            f"{recorded.stream()}{renamed}, which Spark ran to micro-batch {last}; started here, this stream would "
            f"begin at micro-batch {last + 1}, and the rows before it would never reach {targets.describe()}. Give "
            f"this stream a checkpoint location of its own (a new directory); to move that stream on purpose, remove "
            f"{directory / RECORD} and start again"
        )
    _check_writable(directory, location)


def _continues(
    recorded: Targets, targets: Targets, config: CatalogConfig | None, location: str, last: int, moved: dict[str, str]
) -> bool:
    """Whether ``targets`` go on from where ``recorded`` left the location (``moved``: filled with the recorded
    tables found under another name)."""
    if _other_catalog(recorded, targets):
        return False
    if recorded.debezium_namespace is not None or targets.debezium_namespace is not None:
        return recorded.debezium_namespace == targets.debezium_namespace
    kept, renamed = _kept_tables(recorded, targets, config)
    moved.update(renamed)
    if not kept or (len(targets.tables) == 1 and kept != set(targets.tables)) or moved:
        return False
    added = sorted(set(targets.tables) - kept)
    if added:
        log.info(
            "checkpoint location %s: tables %s join the stream at micro-batch %d (rows of earlier micro-batches "
            "went to %s)",
            location,
            ", ".join(added),
            last + 1,
            ", ".join(sorted(recorded.tables)),
        )
    return True


def _other_catalog(recorded: Targets, targets: Targets) -> bool:
    return recorded.catalog is not None and targets.catalog is not None and recorded.catalog != targets.catalog


def _kept_tables(recorded: Targets, targets: Targets, config: CatalogConfig | None) -> tuple[set[str], dict[str, str]]:
    """The stream's tables that were recorded here, and the recorded tables now under another name (old → new).

    A table is the recorded one by its uuid (renamed since, or not), or by name where no uuid was known. A
    recorded name that is another table now, or none, was dropped (its rows went with it; a restart creates it
    again, as after any drop), unless the recorded table lives on under another name: then the earlier
    micro-batches' rows are there, and this is not the table to go on with.
    """
    uuids = {u for u in recorded.tables.values() if u}
    now = table_identities(config, list(targets.tables)) if uuids and config is not None else {}
    kept: set[str] = set()
    moved: dict[str, str] = {}
    for name in targets.tables:
        found = now.get(name)
        if found is not None and found[0] in uuids:
            kept.add(name)
        elif name in recorded.tables:
            elsewhere = _renamed_to(config, name, recorded.locations.get(name))
            if elsewhere is None:
                kept.add(name)
            else:
                moved[name] = elsewhere
    return kept, moved


def _renamed_to(config: CatalogConfig | None, name: str, location: str | None) -> str | None:
    """The table that another identifier than ``name`` names at ``location`` (the recorded table, renamed)."""
    if config is None or not location:
        return None
    metadata = location.rstrip("/") + "/metadata/"
    for identifier, pointer in sorted(every_pointer(config).items()):
        if identifier != name and pointer.startswith(metadata):
            return identifier
    return None


def table_identities(
    config: CatalogConfig | None, identifiers: Sequence[str], catalog: Catalog | None = None
) -> dict[str, tuple[str, str] | None]:
    """Each table's uuid and location, None where the catalog has no such table (yet)."""
    if catalog is None:
        if config is None:
            return dict.fromkeys(identifiers)
        catalog = open_catalog(config, pending_tables=True)
    found: dict[str, tuple[str, str] | None] = {}
    for identifier in identifiers:
        try:
            table = catalog.load_table(identifier)
            found[identifier] = (str(table.metadata.table_uuid), table.location())
        except Exception:  # absent, or not loadable: the name alone is recorded
            found[identifier] = None
    return found


def _check_writable(directory: Path, location: str) -> None:
    """The record can be written when the first micro-batch comes: refused now, before the query starts, where
    it could not (nothing is created yet: a start refused later leaves no directory behind)."""
    folder = directory / RECORD.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"checkpoint location {location}: {existing} is a file, where icesink keeps the record of the "
            f"location's tables ({folder}); move it away"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"checkpoint location {location}: {existing} is not writable, and icesink records the location's "
            f"tables in {folder}; make the checkpoint location writable by the driver"
        )


def record_targets(directory: Path, targets: Targets) -> None:
    """Write ``targets`` down in a checkpoint directory, atomically and durably: a reader sees the old record or
    the new one, also after a crash."""
    record = directory / RECORD
    record.parent.mkdir(parents=True, exist_ok=True)
    temporary = record.with_name(f".{record.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(targets.encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, record)
        directory_handle = os.open(record.parent, os.O_RDONLY)
        try:
            os.fsync(directory_handle)  # the rename itself, durable
        finally:
            os.close(directory_handle)
    finally:
        temporary.unlink(missing_ok=True)


class RecordingTargets:
    """A stream's ``foreachBatch`` callable that writes its targets down before its first micro-batch of the run:
    of two queries started on one location, only the one Spark runs writes them."""

    def __init__(self, handler: Any, directory: Path, targets: Targets) -> None:
        self._handler = handler
        self._directory = directory
        self._targets = targets
        self._recorded = False

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        if not self._recorded:
            try:
                record_targets(self._directory, self._targets)
            except OSError as e:  # it was writable at the start; the stream's own writes matter more
                log.warning("checkpoint location %s: cannot record its tables (%s)", self._directory, e)
            self._recorded = True
        self._handler(batch_df, batch_id)


def recording_targets(handler: Any, df: DataFrame, location: str | None, targets: Targets) -> Any:
    """``handler``, recording ``targets`` in the checkpoint location at its first micro-batch of the run (where the
    location is on this machine's disk)."""
    directory = checkpoint_directory(df.sparkSession, location)
    return handler if directory is None else RecordingTargets(handler, directory, targets)
