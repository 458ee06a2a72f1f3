"""When maintenance is due, and how much of it may run at once: table properties with named defaults.

Every setting is a table property, so one table can be tuned without touching
the committer (``ALTER TABLE ... SET TBLPROPERTIES`` in any engine, or
pyiceberg's ``transaction().set_properties``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields

from icesink.errors import ConfigError
from icesink.properties import POLICY_PROPERTIES

PREFIX = "icesink."
MAX_COMMITS = 10  # as Iceberg's rewrite_data_files partial-progress.max-commits


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class MaintenancePolicy:
    """The maintenance settings of one table, each a table property (``PROPERTY_NAMES``) with a default and a range."""

    convert_at_commit: bool = field(
        default=True,
        metadata=_doc(
            "the committer turns a checkpoint's equality deletes into position deletes in its own commit, so "
            "readers never see them."
        ),
    )
    convert_max_rows: int = field(
        default=100_000_000,
        metadata=_doc(
            "above this many rows in the row groups a checkpoint's deletes may touch (after pruning by file "
            "bounds, row-group statistics and bloom filters), the commit keeps its equality deletes (reading that "
            "many keys would hold the commit up), says so in a warning, and maintenance converts them later, many "
            "checkpoints in one pass."
        ),
    )
    equality_delete_files: int = field(
        default=1, metadata=_doc("maintenance converts equality deletes once the table has this many.")
    )
    min_input_files: int = field(
        default=5,
        metadata=_doc(
            "small files (below ``icesink.maintain.min-file-ratio`` of the target size) are compacted once a "
            "partition has this many of about the same size (within a factor of 4), with the smaller ones; so each "
            "row is rewritten a few times on its way to a full-size file, not once per pass. A file rewritten for "
            "its deletes takes the partition's smaller files with it."
        ),
    )
    min_file_ratio: float = field(
        default=0.75, metadata=_doc("files below this share of ``write.target-file-size-bytes`` are small.")
    )
    delete_ratio_threshold: float = field(
        default=0.3,
        metadata=_doc(
            "a data file whose position deletes remove at least this share of its rows is rewritten, whatever its "
            "size (0: at its first delete). Below it, its position deletes are merged into one delete file of its "
            "own and its rows are not rewritten, so a pass costs what changed, not the size of the files it touched."
        ),
    )
    delete_file_threshold: int = field(
        default=20,
        metadata=_doc(
            "a data file with at least this many delete files applying to it (position or equality) is rewritten, "
            "whatever its size and deleted share."
        ),
    )
    min_commits: int = field(
        default=10,
        metadata=_doc(
            "between commits, the committer looks for compaction work after this many commits since the last "
            "maintenance (conversion is checked after every commit: it costs nothing to know)."
        ),
    )
    max_group_bytes: int = field(
        default=256 * 1024 * 1024,
        metadata=_doc(
            "maintenance rewrites (and holds in memory) at most this many bytes of data files at once, a group, "
            "and asks between groups whether checkpoints wait."
        ),
    )
    max_commits: int = field(
        default=MAX_COMMITS,
        metadata=_doc(
            "one maintenance pass commits its compaction groups in at most this many snapshots, and its merges of "
            "position deletes in at most this many more (fewer when waiting checkpoints stop it early: the groups "
            "written so far are committed first). A commit rewrites the manifests listing the files it replaces, "
            "so a commit per group would make a pass over many partitions cost the square of their number; more "
            "commits keep more of a pass that fails half-way."
        ),
    )
    max_seconds: float = field(
        default=10.0,
        metadata=_doc(
            "between commits, maintenance starts no new group after this many seconds while checkpoints wait. A "
            "waiting checkpoint is delayed by at most this plus one group and one maintenance commit."
        ),
    )

    @classmethod
    def of(
        cls, properties: Mapping[str, str], identifier: str, only: Collection[str] | None = None
    ) -> MaintenancePolicy:
        """The policy from the table's properties; a malformed or out-of-range value is a ConfigError naming it.

        ``only`` names the settings to read (the others keep their defaults): a commit reads only what it
        uses, so a mistake in a maintenance setting holds up maintenance, never the stream's commits.
        """
        values: dict[str, object] = {}
        for f in fields(cls):
            if only is not None and f.name not in only:
                continue
            name = PROPERTY_NAMES[f.name]
            raw = properties.get(name)
            if raw is not None:
                values[f.name] = _parse(identifier, f.name, raw)
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def reference(cls) -> list[tuple[str, str, str, str]]:
        """(table property, default, allowed values, meaning) of every setting, for the documentation."""
        rows = []
        for f in fields(cls):
            if f.type == "bool":
                allowed = "true or false"
            else:
                low, high, _ = RANGES[f.name]
                allowed = f"{low:g} or more" if high == math.inf else f"{low:g} to {high:g}"
            rows.append((PROPERTY_NAMES[f.name], _shown(f.default), allowed, f.metadata["doc"]))
        return rows


def _shown(default: object) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, int) and default >= 1024 * 1024 and default % (1024 * 1024) == 0:
        return f"{default} ({default // (1024 * 1024)} MiB)"
    return f"{default:g}" if isinstance(default, float) else str(default)


def _parse(identifier: str, attribute: str, raw: str) -> bool | int | float:
    name = PROPERTY_NAMES[attribute]
    kind = type(getattr(MaintenancePolicy(), attribute))
    try:
        if kind is bool:
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
        value: int | float = kind(raw)
    except ValueError as e:
        raise ConfigError(f"table {identifier}: table property {name}={raw!r} is not a valid {kind.__name__}") from e
    low, high, why = RANGES[attribute]
    if not low <= value <= high:  # also refuses NaN
        allowed = f"{low:g} or more" if high == math.inf else f"from {low:g} to {high:g}"
        raise ConfigError(
            f"table {identifier}: table property {name}={raw!r} is out of range: it must be {allowed} ({why}); "
            "set it within the range, or remove it for the default"
        )
    return value


PROPERTY_NAMES = POLICY_PROPERTIES
CONVERT_AT_COMMIT = PROPERTY_NAMES["convert_at_commit"]
# What a stream's commit reads: whether and how far it converts equality deletes.
COMMIT_SETTINGS = ("convert_at_commit", "convert_max_rows")

# Allowed values of the numeric settings, inclusive, and why the bound is where it is.
RANGES: dict[str, tuple[float, float, str]] = {
    "convert_max_rows": (0, math.inf, "a number of rows"),
    "equality_delete_files": (1, math.inf, "a number of files"),
    "min_input_files": (2, math.inf, "a lone small file would be rewritten into the same small file on every pass"),
    "min_file_ratio": (0, 1, "a share of the target file size; above 1, full-size files would be rewritten forever"),
    "delete_ratio_threshold": (0, 1, "a share of a file's rows"),
    "delete_file_threshold": (1, math.inf, "at 0 every data file would be rewritten on every pass"),
    "min_commits": (1, math.inf, "a number of commits"),
    "max_group_bytes": (1, math.inf, "a number of bytes"),
    "max_commits": (1, math.inf, "a number of commits"),
    "max_seconds": (0, 24 * 3600, "seconds, finite"),
}
