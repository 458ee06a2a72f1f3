"""One error hierarchy for icesink.

Every error raised on purpose by icesink derives from :class:`IcesinkError`.
Errors are marked either *transient* (retrying the same operation later can
succeed: a lost database connection, a commit conflict) or *terminal* (the
input or configuration must change first). The committer retries the first
kind and stops a table's queue on the second.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

# Spark hands the driver a task's failure as text (see ``icesink.sink.executor_errors``): a task names its error's
# table in a note, which Python prints on the line after the error's, for the driver to rebuild the error with it.
TABLE_NOTE = "icesink table: "


class IcesinkError(Exception):
    """Raised when icesink cannot do what was asked; the message says what to do.

    ``table``, ``checkpoint_id`` and ``job_id`` say where, as fields (the message says it in words), so that
    the committer's health report, ``--json`` output and callers can name the table and checkpoint that failed
    without reading the text. They are None where nothing as narrow is to blame, or not known yet: the code
    that knows (the committer, a stream's micro-batch) fills in what is missing with :meth:`located`.
    """

    transient: bool = False

    def __init__(
        self,
        message: str = "",
        *,
        table: str | None = None,
        checkpoint_id: int | None = None,
        job_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.checkpoint_id = checkpoint_id
        self.job_id = job_id

    def located(self, table: str | None = None, checkpoint_id: int | None = None, job_id: str | None = None) -> Self:
        """The same error, with the fields it did not have yet filled in (one it has is kept)."""
        self.table = self.table if self.table is not None else table
        self.checkpoint_id = self.checkpoint_id if self.checkpoint_id is not None else checkpoint_id
        self.job_id = self.job_id if self.job_id is not None else job_id
        return self

    def fields(self) -> dict[str, object]:
        """The error as plain values: its kind, where it happened, whether retrying can help, and its message."""
        return {
            "error": type(self).__name__,
            "table": self.table,
            "checkpoint_id": self.checkpoint_id,
            "job_id": self.job_id,
            "transient": self.transient,
            "message": str(self),
        }


@contextmanager
def naming_table(table: str) -> Iterator[None]:
    """On an executor: an icesink error raised inside is about ``table``, as its field and as a note of its text."""
    try:
        yield
    except IcesinkError as e:
        e.located(table)
        if not any(note.startswith(TABLE_NOTE) for note in getattr(e, "__notes__", ())):
            e.add_note(TABLE_NOTE + json.dumps(e.table))
        raise


class TransientError(IcesinkError):
    """Raised when an operation failed for a reason that may pass by itself."""

    transient = True


class TerminalError(IcesinkError):
    """Raised when retrying cannot help until something is changed."""


class ConfigError(TerminalError):
    """Raised when a catalog, stream or committer setting is missing or invalid."""


class CatalogNotMigratedError(TerminalError):
    """Raised when the catalog database lacks the schema icesink needs."""


class CatalogUnavailableError(TransientError):
    """Raised when the catalog database cannot be reached."""


class TableNotFoundError(TerminalError):
    """Raised when the target table does not exist and may not be created."""


class SchemaMismatchError(TerminalError):
    """Raised when a DataFrame's schema does not fit the target table.

    ``column`` is the path of the column (or nested field) whose type does not fit, where one is to blame, and
    ``table_type`` its type in the table: what a stream explaining the refusal in its own words needs."""

    def __init__(self, message: str, *, column: str | None = None, table_type: str | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.column = column
        self.table_type = table_type


class UnsupportedTableError(TerminalError):
    """Raised when a table uses a feature icesink cannot write correctly."""


class NotStreamingError(TerminalError):
    """Raised when a batch DataFrame is passed where a streaming one is required."""


class BadRowError(TerminalError):
    """Raised when a row cannot be written (for example a null in a required column)."""


class CheckpointRewindError(TerminalError):
    """Raised when a stream restarts below the checkpoint the table already holds for its job."""


class JobIdConflictError(CheckpointRewindError):
    """Raised when two streams (two checkpoint histories) write under one job id."""


class TableCreatedElsewhereError(TerminalError):
    """Raised when another tool created a table of the name a stream's not yet committed table has."""


class TableReplacedError(TerminalError):
    """Raised when a checkpoint was staged, or publishing declared, for a table that was since dropped and created
    again under its name."""


class CatalogReplacedError(TerminalError):
    """Raised when the catalog database a process opened is no longer the one at its configured location."""


class LeaseHeldError(TransientError):
    """Raised when another committer holds the lease of a committer run once (``--once``) that may not wait for it."""


class MaintenanceBusyError(TransientError):
    """Raised when another maintainer holds a table's maintenance lease."""


class DeleteConversionError(TransientError):
    """Raised when equality deletes that must become position deletes at commit could not be converted."""


class CommitConflictError(TransientError):
    """Raised when the table head moved while a commit was being prepared."""


class StartingSnapshotExpiredError(TerminalError):
    """Raised when a change read starts at a snapshot the table no longer keeps (expired or rolled back)."""


class CheckpointNotCommittedError(TerminalError):
    """Raised when a read at a checkpoint finds a table where that checkpoint is staged but not committed."""


class SnapshotNotFoundError(TerminalError):
    """Raised when a snapshot id names no snapshot of the table."""


class BadFilterError(ConfigError):
    """Raised when a row filter does not parse or names a column the table does not have."""


class ManifestError(TerminalError):
    """Raised when a staged manifest is missing or cannot be read."""


class UnexpectedCommitError(TerminalError):
    """Raised when committing a checkpoint failed with an error icesink did not foresee; it stays staged."""


class WriteResultError(TerminalError):
    """Raised when a task's write result cannot be read (an executor running another icesink version)."""


class LedgerFormatError(TerminalError):
    """Raised when a ledger row cannot be read (staged by a later icesink release); the row is left as it is."""


class TableMetadataError(TerminalError):
    """Raised when a table's metadata file cannot be read (missing, not JSON, not Iceberg metadata)."""


class AuditFailedError(TerminalError):
    """Raised when a branch snapshot fails its audit and the stream was told to stop (``on_audit_failure="stop"``).

    ``snapshot_id`` is the snapshot that failed and ``problems`` the failed checks' problems, by check."""

    def __init__(
        self,
        message: str,
        *,
        snapshot_id: int | None = None,
        problems: dict[str, list[str]] | None = None,
        **where: Any,
    ) -> None:
        super().__init__(message, **where)
        self.snapshot_id = snapshot_id
        self.problems = problems or {}


class PublishError(TerminalError):
    """Raised when ``main`` cannot be moved to a branch's snapshot (main moved on its own, or the snapshot does not
    descend from it); nothing changed."""
