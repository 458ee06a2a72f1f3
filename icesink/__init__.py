"""icesink: exactly-once streaming writes from PySpark into Apache Iceberg tables.

``import icesink`` is cheap: Spark, pyiceberg and SQLAlchemy are imported
only when a function that needs them is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icesink.errors import (
    AuditFailedError,
    BadFilterError,
    BadRowError,
    CatalogNotMigratedError,
    CatalogReplacedError,
    CatalogUnavailableError,
    CheckpointNotCommittedError,
    CheckpointRewindError,
    CommitConflictError,
    ConfigError,
    DeleteConversionError,
    IcesinkError,
    JobIdConflictError,
    MaintenanceBusyError,
    ManifestError,
    NotStreamingError,
    PublishError,
    SchemaMismatchError,
    SnapshotNotFoundError,
    StartingSnapshotExpiredError,
    TableMetadataError,
    TableNotFoundError,
    TerminalError,
    TransientError,
    UnexpectedCommitError,
    UnsupportedTableError,
    WriteResultError,
)

if TYPE_CHECKING:
    from icesink import checks
    from icesink.audit.inputs import AuditInput
    from icesink.catalog.config import CatalogConfig
    from icesink.changelog.api import changes
    from icesink.cut import changes_of_tables, read_tables
    from icesink.datasource import read_stream, register
    from icesink.debezium_events.stream_spec import debezium
    from icesink.reader import read
    from icesink.readiness import wait_for_partition, watermark
    from icesink.sink.options import Target
    from icesink.sink.query_errors import error_of
    from icesink.sink.stream import stream

__version__ = "0.1.0"

__all__ = [
    "AuditFailedError",
    "AuditInput",
    "BadFilterError",
    "BadRowError",
    "CatalogConfig",
    "CatalogNotMigratedError",
    "CatalogReplacedError",
    "CatalogUnavailableError",
    "CheckpointNotCommittedError",
    "CheckpointRewindError",
    "CommitConflictError",
    "ConfigError",
    "DeleteConversionError",
    "IcesinkError",
    "JobIdConflictError",
    "MaintenanceBusyError",
    "ManifestError",
    "NotStreamingError",
    "PublishError",
    "SchemaMismatchError",
    "SnapshotNotFoundError",
    "StartingSnapshotExpiredError",
    "TableMetadataError",
    "TableNotFoundError",
    "Target",
    "TerminalError",
    "TransientError",
    "UnexpectedCommitError",
    "UnsupportedTableError",
    "WriteResultError",
    "changes",
    "changes_of_tables",
    "checks",
    "debezium",
    "error_of",
    "read",
    "read_stream",
    "read_tables",
    "register",
    "stream",
    "wait_for_partition",
    "watermark",
]


def __getattr__(name: str) -> Any:
    if name == "stream":
        from icesink.sink.stream import stream

        return stream
    if name == "read":
        from icesink.reader import read

        return read
    if name == "changes":
        from icesink.changelog.api import changes

        return changes
    if name in ("read_stream", "register"):
        from icesink import datasource

        return getattr(datasource, name)
    if name == "debezium":
        from icesink.debezium_events.stream_spec import debezium

        return debezium
    if name in ("read_tables", "changes_of_tables"):
        from icesink import cut

        return getattr(cut, name)
    if name == "error_of":
        from icesink.sink.query_errors import error_of

        return error_of
    if name == "Target":
        from icesink.sink.options import Target

        return Target
    if name in ("watermark", "wait_for_partition"):
        from icesink import readiness

        return getattr(readiness, name)
    if name == "checks":
        import importlib

        return importlib.import_module("icesink.checks")
    if name == "AuditInput":
        from icesink.audit.inputs import AuditInput

        return AuditInput
    if name == "CatalogConfig":
        from icesink.catalog.config import CatalogConfig

        return CatalogConfig
    raise AttributeError(f"module 'icesink' has no attribute {name!r}")
