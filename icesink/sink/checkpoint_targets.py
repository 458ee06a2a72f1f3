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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
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
            {"format": FORMAT, "tables": dict(self.tables), "debezium_namespace": self.debezium_namespace},
            sort_keys=True,
        )


def checkpoint_directory(spark: SparkSession, location: str | None) -> Path | None:
    """The directory on this machine's disk that Spark keeps the checkpoint in, resolved as Spark resolves it;
    None where it is elsewhere (HDFS, an object store) or the session has no JVM to ask."""
    if not location:
        return None
    try:
        jvm: Any = spark._jvm
        hadoop = spark._jsc.hadoopConfiguration()
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
        if not isinstance(tables, dict) or not (namespace is None or isinstance(namespace, str)):
            raise ValueError("not the shape icesink writes")
        return Targets({str(k): (str(v) if v else None) for k, v in tables.items()}, namespace)
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


def refuse_other_targets(
    df: DataFrame, location: str | None, targets: Targets, config: CatalogConfig | None
) -> Path | None:
    """Refused: a start whose ``targets`` would take over the progress another stream's tables made in
    ``location``. Returns the checkpoint's directory on this machine (None: not checked), checked writable."""
    directory = checkpoint_directory(df.sparkSession, location)
    if directory is None or location is None:
        return None
    refuse_in(directory, location, targets, config)
    return directory


def refuse_in(directory: Path, location: str, targets: Targets, config: CatalogConfig | None) -> None:
    """:func:`refuse_other_targets` in the checkpoint's ``directory`` on this machine."""
    last = last_committed_batch(directory)
    recorded = recorded_targets(directory, location) if last is not None else None
    if recorded is not None and last is not None and not _continues(recorded, targets, config, location, last):
        raise ConfigError(
            f"{targets.describe()}: checkpoint location {location} holds the progress of "
            f"{recorded.stream()}, which Spark ran to micro-batch {last}; started here, this stream would begin at "
            f"micro-batch {last + 1}, and the rows before it would never reach {targets.describe()}. Give this "
            f"stream a checkpoint location of its own (a new directory); to move that stream on purpose, remove "
            f"{directory / RECORD} and start again"
        )
    _check_writable(directory, location)


def _continues(recorded: Targets, targets: Targets, config: CatalogConfig | None, location: str, last: int) -> bool:
    """Whether ``targets`` go on from where ``recorded`` left the location."""
    if recorded.debezium_namespace is not None or targets.debezium_namespace is not None:
        return recorded.debezium_namespace == targets.debezium_namespace
    kept = _kept_tables(recorded, targets, config)
    if not kept or (len(targets.tables) == 1 and kept != set(targets.tables)):
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


def _kept_tables(recorded: Targets, targets: Targets, config: CatalogConfig | None) -> set[str]:
    """The stream's tables that were recorded here: the same table (by uuid, where one was recorded: renamed
    since, or not), or by name where no uuid was known."""
    uuids = {u for u in recorded.tables.values() if u}
    now = table_uuids(config, list(targets.tables)) if uuids and config is not None else {}
    kept = set()
    for name in targets.tables:
        known = recorded.tables.get(name)
        if now.get(name) is not None and now[name] in uuids:
            kept.add(name)  # the same table, under this name or another
        elif name in recorded.tables and (known is None or config is None):
            kept.add(name)  # recorded by name alone
    return kept


def table_uuids(
    config: CatalogConfig | None, identifiers: Sequence[str], catalog: Catalog | None = None
) -> dict[str, str | None]:
    """Each table's uuid, None where the catalog has no such table (yet)."""
    if catalog is None:
        if config is None:
            return dict.fromkeys(identifiers)
        catalog = open_catalog(config, pending_tables=True)
    found: dict[str, str | None] = {}
    for identifier in identifiers:
        try:
            found[identifier] = str(catalog.load_table(identifier).metadata.table_uuid)
        except Exception:  # absent, or not loadable: the name alone is recorded
            found[identifier] = None
    return found


def _check_writable(directory: Path, location: str) -> None:
    """The record can be written when the first micro-batch comes (refused now, before the query starts)."""
    try:
        (directory / RECORD).parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"checkpoint location {location}: cannot create {directory / RECORD.parent} ({e}); Spark needs the "
            "location writable too: check its permissions"
        ) from None
    if not os.access(directory / RECORD.parent, os.W_OK):
        raise ConfigError(
            f"checkpoint location {location}: {directory / RECORD.parent} is not writable; make the checkpoint "
            "location writable by the driver"
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
