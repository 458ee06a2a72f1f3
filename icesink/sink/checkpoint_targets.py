"""Which tables a checkpoint location's progress belongs to, so that it is never handed to another table.

Spark keeps a stream's progress (the source offsets of every micro-batch it ran) in the checkpoint location,
and knows nothing of where a ``foreachBatch`` sink put the rows. Start a stream into table ``b`` with the
location a stream into table ``a`` used, and Spark carries on after ``a``'s last micro-batch: ``b`` gets only
the rows after it, and the rows before are in ``a`` alone, with nothing said. So icesink writes down, in the
location (``icesink/targets.json``, beside Spark's own files), the tables its micro-batches went to, and a start
whose tables are not those is refused while Spark has committed micro-batches there. A table renamed since is
still the same table (matched by its uuid); a stream of several tables may gain tables (they start at the next
micro-batch, as its routing does), but not be replaced by others. Local locations only, as Spark's ``metadata``
is read (:func:`icesink.sink.preflight.query_id_of`): an object store's location is not checked.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from icesink import paths
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

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
        if self.debezium_namespace is not None:
            return f"the Debezium stream into namespace {self.debezium_namespace}"
        names = sorted(self.tables)
        return f"table {names[0]}" if len(names) == 1 else f"tables {', '.join(names)}"

    def encode(self) -> str:
        return json.dumps(
            {"format": FORMAT, "tables": dict(self.tables), "debezium_namespace": self.debezium_namespace},
            sort_keys=True,
        )


def _local(location: str | None) -> Path | None:
    parsed = paths.parse(location or "")
    return Path(parsed.path) if location and parsed.is_local else None


def recorded_targets(location: str | None) -> Targets | None:
    """The targets written down in a local checkpoint location (None: none, or one this release cannot read)."""
    root = _local(location)
    if root is None:
        return None
    try:
        values = json.loads((root / RECORD).read_text(encoding="utf-8"))
        tables = values["tables"]
        namespace = values.get("debezium_namespace")
        if not isinstance(tables, dict) or not (namespace is None or isinstance(namespace, str)):
            raise ValueError("unexpected shape")
        return Targets({str(k): (str(v) if v else None) for k, v in tables.items()}, namespace)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("checkpoint location %s: %s is unreadable (%s); it is written anew", location, RECORD, e)
        return None


def last_committed_batch(location: str | None) -> int | None:
    """The last micro-batch Spark recorded as done in a local checkpoint location (None: none)."""
    root = _local(location)
    commits = root / "commits" if root is not None else None
    if commits is None or not commits.is_dir():
        return None
    done = [int(p.name) for p in commits.iterdir() if p.name.isascii() and p.name.isdigit()]
    return max(done, default=None)


def refuse_other_targets(location: str | None, targets: Targets, config: CatalogConfig | None) -> None:
    """Refused: a start whose ``targets`` would take over the progress another stream's tables made here."""
    recorded = recorded_targets(location)
    last = last_committed_batch(location)
    if recorded is None or last is None:
        return
    if recorded.debezium_namespace is not None or targets.debezium_namespace is not None:
        if recorded.debezium_namespace == targets.debezium_namespace:
            return
    else:
        kept = _kept_tables(recorded, targets, config)
        if kept and (len(targets.tables) > 1 or kept == set(targets.tables)):
            added = sorted(set(targets.tables) - kept)
            if added:
                log.info(
                    "checkpoint location %s: tables %s join the stream at micro-batch %d (rows of earlier "
                    "micro-batches went to %s)",
                    location,
                    ", ".join(added),
                    last + 1,
                    ", ".join(sorted(recorded.tables)),
                )
            return
    raise ConfigError(
        f"{targets.describe()}: checkpoint location {location} holds the progress of a stream into "
        f"{recorded.describe()}, which Spark ran to micro-batch {last}; started here, this stream would begin at "
        f"micro-batch {last + 1}, and the rows before it would never reach {targets.describe()}. Give this stream "
        f"a checkpoint location of its own (a new directory); to move that stream on purpose, remove "
        f"{Path(str(_local(location))) / RECORD} and start again"
    )


def _kept_tables(recorded: Targets, targets: Targets, config: CatalogConfig | None) -> set[str]:
    """The stream's tables that were recorded here: by name, or by uuid for a table renamed since."""
    kept = {t for t in targets.tables if t in recorded.tables}
    uuids = {u for u in recorded.tables.values() if u}
    missing = [t for t in targets.tables if t not in kept]
    if missing and uuids and config is not None:
        found = table_uuids(config, missing)
        kept |= {t for t, u in found.items() if u in uuids}
    return kept


def table_uuids(
    config: CatalogConfig, identifiers: Sequence[str], catalog: Catalog | None = None
) -> dict[str, str | None]:
    """Each table's uuid, None where the catalog has no such table (yet)."""
    catalog = catalog if catalog is not None else open_catalog(config, pending_tables=True)
    found: dict[str, str | None] = {}
    for identifier in identifiers:
        try:
            found[identifier] = str(catalog.load_table(identifier).metadata.table_uuid)
        except Exception:  # absent, or not loadable: the name alone is recorded
            found[identifier] = None
    return found


def record_targets(location: str | None, targets: Targets) -> None:
    """Write ``targets`` down in a local checkpoint location (atomically: a reader sees the old or the new)."""
    root = _local(location)
    if root is None:
        return
    record = root / RECORD
    record.parent.mkdir(parents=True, exist_ok=True)
    temporary = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    temporary.write_text(targets.encode(), encoding="utf-8")
    os.replace(temporary, record)
