"""``icesink committer gc``: remove files nothing references any more.

Killed or retried task attempts leave data files that no checkpoint names,
merged manifests and expired snapshots leave manifests and manifest lists
behind, the ledger keeps a row per committed checkpoint, and the audit record a
row per audited snapshot (pruned once the table expired the snapshot). A file under the
table's location is removed only when all of these hold:

* no snapshot, metadata log entry or statistics entry of the table names it;
* no checkpoint in the ledger names it (every file a staged checkpoint's row lists; for one staged before
  revision 0018, its delta manifest and every file listed in it, and a committed one's manifest not yet
  cleaned);
* it was last modified before ``older_than`` ago, which protects files of
  micro-batches still being written or staged (keep it above the longest batch);
* it is not under another table's directory inside this table's location (a
  table named ``a/b`` beside ``a``, placed there by a catalog's default layout).

The ledger is read before the table: a checkpoint committed in between is
then named by one of the two, never by neither.
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from icesink import paths
from icesink.catalog.audit_record import AuditRecord
from icesink.catalog.checkpoints import CheckpointState, InlineFiles
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import load_table
from icesink.catalog.pointers import every_pointer
from icesink.committer.done_actions import SUCCESS_FILE
from icesink.errors import LedgerFormatError, ManifestError
from icesink.iceberg.manifests import DeltaManifest, read_delta_manifest
from icesink.iceberg.references import list_files, referenced_paths

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

log = logging.getLogger("icesink.gc")


@dataclass
class GcReport:
    table: str
    files_seen: int = 0
    referenced: int = 0
    too_young: int = 0
    deleted: list[str] = field(default_factory=list)
    ledger_rows_pruned: int = 0
    audit_rows_pruned: int = 0  # the audits of snapshots the table expired
    dry_run: bool = False


def collect_garbage(
    catalog: SqlCatalog,
    config: CatalogConfig,
    identifier: str,
    older_than: datetime.timedelta,
    dry_run: bool = False,
) -> GcReport:
    ledger = Ledger(config)
    report = GcReport(table=identifier, dry_run=dry_run)
    cutoff_ms = int((time.time() - older_than.total_seconds()) * 1000)
    # Before the table is read: what is committed (and audited) after it was read is younger than this.
    before = datetime.datetime.now(datetime.UTC) - older_than

    table = load_table(catalog, config, identifier)  # for its FileIO; what it references is read below
    keep = _staged_files(ledger, table, identifier)
    table = load_table(catalog, config, identifier)  # after the ledger: see the module docstring
    with database_errors(config):
        keep.update(referenced_paths(table))
    _sort_stored_files(table, {paths.normal_form(p) for p in keep}, cutoff_ms, report, _others(config, identifier))
    kept = {s.snapshot_id for s in table.metadata.snapshots}
    uuid = str(table.metadata.table_uuid)
    report.audit_rows_pruned = AuditRecord(config).prune(identifier, kept, before, dry_run=dry_run, table_uuid=uuid)
    if not dry_run:
        for uri in report.deleted:
            table.io.delete(uri)
        report.ledger_rows_pruned = ledger.prune_committed(identifier, before)
    log.info(
        "table=%s gc: %d files, %d referenced, %d too young, %d %s, %d ledger rows pruned, %d audit rows pruned",
        identifier,
        report.files_seen,
        report.referenced,
        report.too_young,
        len(report.deleted),
        "would be deleted" if dry_run else "deleted",
        report.ledger_rows_pruned,
        report.audit_rows_pruned,
    )
    return report


def _staged_files(ledger: Ledger, table: Table, identifier: str) -> set[str]:
    """What the ledger still needs: staged manifests (of releases before inline files), and the files of
    checkpoints not committed yet."""

    keep: set[str] = set()
    for row in ledger.for_table(identifier, unreadable_too=True, with_files=True):
        if (row.state == CheckpointState.COMMITTED and row.manifests_deleted) or row.state == CheckpointState.DISCARDED:
            continue  # a discarded checkpoint's files are garbage: no snapshot will ever name them
        if row.unreadable and row.state == CheckpointState.STAGED:  # its files cannot be told from garbage
            raise LedgerFormatError(f"{row.unreadable}; gc deletes nothing in this table meanwhile")
        keep.update(row.manifest_paths)
        if row.state != CheckpointState.STAGED:
            continue
        for deletes, staged in row.manifests.present():
            if isinstance(staged, InlineFiles):  # in the ledger row itself
                keep.update(row.files.paths if row.files is not None else ())
                continue
            path = staged.path
            manifest = DeltaManifest(path, row.spec_id, staged.length, deletes=deletes)
            try:
                keep.update(f.file_path for f in read_delta_manifest(table.io, manifest))
            except Exception as e:  # without the manifest, its files cannot be told from garbage
                now = ledger.get(identifier, row.job_id, row.checkpoint_id)
                if now is not None and now.state == CheckpointState.COMMITTED:
                    # Committed (and its manifest cleaned) since the ledger was read, so before the
                    # table is read below: its files are among the table's references.
                    continue
                raise ManifestError(
                    f"table {identifier}, job {row.job_id}, checkpoint {row.checkpoint_id}: staged manifest {path} "
                    f"cannot be read ({type(e).__name__}: {e}); gc deletes nothing in this table until the "
                    "checkpoint is committed or removed from the ledger"
                ) from e
    return keep


def _others(config: CatalogConfig, identifier: str) -> tuple[str, ...]:
    """The directories of the catalog's other tables (where their metadata files are, a ``metadata`` directory's
    parent in the usual layout), each ending in "/"; those inside this table's locations are left alone."""

    directories = {
        paths.normal_form(location.rsplit("/", 1)[0]).removesuffix("/metadata") + "/"
        for name, location in every_pointer(config).items()
        if name != identifier
    }
    return tuple(sorted(directories))


def _sort_stored_files(
    table: Table, kept: set[str], cutoff_ms: int, report: GcReport, others: tuple[str, ...] = ()
) -> None:
    """Every file under the table's locations: referenced, too young to judge, or garbage (``report.deleted``);
    files under ``others`` (other tables' directories inside this table's) are not this table's to judge."""

    locations = {table.location().rstrip("/")}
    for configured in ("write.data.path", "write.metadata.path"):
        if table.properties.get(configured):
            locations.add(table.properties[configured].rstrip("/"))
    for location in sorted(locations):
        inside = tuple(o for o in others if o.startswith(paths.normal_form(location).rstrip("/") + "/"))
        for stored in list_files(table, location):
            normal = paths.normal_form(stored.uri)
            if normal.startswith(inside) or normal.rsplit("/", 1)[-1] == SUCCESS_FILE:
                continue  # another table's; or a partition's done marker, which tools wait on and no snapshot names
            report.files_seen += 1
            if normal in kept:
                report.referenced += 1
            elif stored.modified_ms >= cutoff_ms:
                report.too_young += 1
            else:
                report.deleted.append(stored.uri)


def parse_age(text: str) -> datetime.timedelta:
    """``90s``, ``30m``, ``12h``, ``3d`` as a duration; anything else is a ValueError naming the forms."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value, unit = text[:-1], text[-1:].lower()
    if unit not in units or not value.isdigit():
        raise ValueError(f"{text!r} is not an age; write a whole number with s, m, h or d, e.g. 3d or 12h")
    return datetime.timedelta(seconds=int(value) * units[unit])
