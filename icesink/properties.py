"""Every name icesink writes into a table's metadata, in one place.

Snapshot summary properties say which job and checkpoints a snapshot holds, and
what maintenance made it; table properties hold the committed-checkpoint marker
where snapshot expiry cannot remove it, and the per-table settings of
:mod:`icesink.maintenance.policy` (their defaults, ranges and meaning live there).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from icesink.errors import ConfigError

# --- snapshot summary -----------------------------------------------------------------------------------------------
JOB_ID_PROPERTY = "icesink.job-id"
MAX_CHECKPOINT_PROPERTY = "icesink.max-committed-checkpoint-id"
STREAM_ID_PROPERTY = "icesink.stream-id"  # the Spark query whose checkpoint history the ids belong to
CHECKPOINT_RANGE_PROPERTY = "icesink.checkpoint-ids"  # "first-last" of the checkpoints in the snapshot
CONVERTED_PROPERTY = "icesink.converted-equality-deletes"
DISCARDED_PROPERTY = "icesink.discarded-checkpoints"
MAINTENANCE_PROPERTY = "icesink.maintenance"  # which maintenance made the snapshot
# Its values. Each keeps every row as it was: a branch's audit passes them through (icesink.audit.chain).
MAINTENANCE_CONVERT = "convert-equality-deletes"
MAINTENANCE_COMPACT = "compact"
MAINTENANCE_MERGE_DELETES = "rewrite-position-deletes"
MAINTENANCE_KINDS = frozenset({MAINTENANCE_CONVERT, MAINTENANCE_COMPACT, MAINTENANCE_MERGE_DELETES})
BASE_SNAPSHOT_PROPERTY = "icesink.maintenance.base-snapshot-id"
# On a merge of position deletes: the positions it removed and did not write again (named twice, or naming a data
# file no longer live). Added positions plus these are the removed ones.
MERGE_DROPPED_PROPERTY = "icesink.maintenance.dropped-positions"
# Shared by the snapshots one atomic commit made in several tables (one transaction of the catalog).
COMMIT_ID_PROPERTY = "icesink.commit-id"
# A stream with event_time: its watermark (ISO 8601, microseconds, zone) in every snapshot icesink makes, and the
# rows of the checkpoints that arrived late (below the watermark the micro-batch started with) or without one.
WATERMARK_PROPERTY = "icesink.watermark"
LATE_ROWS_PROPERTY = "icesink.late-rows"
UNTIMED_ROWS_PROPERTY = "icesink.rows-without-event-time"
# The table field (its id) the watermark is about: only partitions of a time transform of it are done by it.
EVENT_TIME_FIELD_PROPERTY = "icesink.event-time-field-id"
# The time partitions the snapshot's watermark made done (JSON list of partition paths, ``ts_day=2026-11-25``).
PARTITIONS_DONE_PROPERTY = "icesink.partitions-done"

# Written by the committer and by maintenance into every snapshot they make. A checkpoint's own summary values
# never hold them: the marker, the maintenance a change reader skips, the atomic commit would lie.
COMMITTER_SUMMARY_NAMES = frozenset(
    {
        JOB_ID_PROPERTY,
        MAX_CHECKPOINT_PROPERTY,
        STREAM_ID_PROPERTY,
        CHECKPOINT_RANGE_PROPERTY,
        CONVERTED_PROPERTY,
        DISCARDED_PROPERTY,
        MAINTENANCE_PROPERTY,
        BASE_SNAPSHOT_PROPERTY,
        MERGE_DROPPED_PROPERTY,
        COMMIT_ID_PROPERTY,
    }
)

# --- table properties -----------------------------------------------------------------------------------------------
# The marker again, per job, in the same atomic metadata commit (``<prefix><job id>``).
TABLE_PROPERTY_PREFIX = "icesink.max-committed-checkpoint-id."
STREAM_TABLE_PROPERTY_PREFIX = "icesink.stream-id."
# A job's watermark splits (JSON: split → [mark, last seen]), in the same commit as the snapshot holding its watermark.
WATERMARK_SPLITS_PREFIX = "icesink.watermark-splits."
# The same two of a job committing to another branch than main: ``icesink.branch.<branch>.<name>.<job id>``.
BRANCH_PROPERTY_PREFIX = "icesink.branch."
# The source table a Debezium stream's table belongs to, for good: JSON of connector, database, schema and table.
SOURCE_PROPERTY = "icesink.debezium.source"
# How many files one write task keeps open at once (its other partitions wait in memory or are closed).
MAX_OPEN_FILES_PROPERTY = "icesink.write.max-open-files"
# What the committer does once a partition is done (icesink.committer.done_actions).
SUCCESS_FILE_PROPERTY = "icesink.partition-done.success-file"
HTTP_POST_PROPERTY = "icesink.partition-done.http-post"
# Settings a user sets on the table, by MaintenancePolicy attribute.
POLICY_PROPERTIES = {
    "convert_at_commit": "icesink.equality-deletes.convert-at-commit",
    "convert_max_rows": "icesink.equality-deletes.convert-max-rows",
    "equality_delete_files": "icesink.maintain.equality-delete-files",
    "min_input_files": "icesink.maintain.min-input-files",
    "min_file_ratio": "icesink.maintain.min-file-ratio",
    "delete_ratio_threshold": "icesink.maintain.delete-ratio-threshold",
    "delete_file_threshold": "icesink.maintain.delete-file-threshold",
    "min_commits": "icesink.maintain.min-commits",
    "max_group_bytes": "icesink.maintain.max-group-bytes",
    "max_commits": "icesink.maintain.max-commits",
    "max_seconds": "icesink.maintain.max-seconds",
}
# The icesink table properties a user sets; any other name under icesink's prefix is a typo, or icesink's own.
USER_PROPERTIES = (MAX_OPEN_FILES_PROPERTY, SUCCESS_FILE_PROPERTY, HTTP_POST_PROPERTY, *POLICY_PROPERTIES.values())
# What icesink writes into the table at every commit, per job (``<prefix><job id>``).
WRITTEN_PREFIXES = (
    TABLE_PROPERTY_PREFIX,
    STREAM_TABLE_PROPERTY_PREFIX,
    BRANCH_PROPERTY_PREFIX,
    WATERMARK_SPLITS_PREFIX,
)


def check_user_properties(properties: Mapping[str, object] | None, where: str) -> None:
    """Refuse the ``icesink.*`` table properties a user may not set, naming ``where`` they were given (the
    table, or the call): an unknown name would be stored and never applied, and icesink writes its markers
    itself. Every other name (Iceberg's own ``write.*``, ``commit.*``, ...) is left to the table."""
    for key in properties or {}:
        name = str(key)
        if name == SOURCE_PROPERTY:
            raise ConfigError(
                f"{where}: table property {name!r} is icesink's own: a Debezium stream records there which source "
                "table the table belongs to, and refuses any other; remove it from table_properties"
            )
        if name.startswith(WRITTEN_PREFIXES):
            raise ConfigError(
                f"{where}: table property {name!r} is icesink's own: icesink writes it at every commit (a job's "
                "committed-checkpoint marker, and the Spark query its checkpoints belong to), and a value set by "
                "hand would make a stream skip checkpoints as committed or refuse to start; remove it from "
                "table_properties"
            )
        unknown = unknown_property(name)
        if unknown is not None:
            raise ConfigError(
                f"{where}: table_properties holds {unknown}: it would be stored and never applied. Correct the "
                "name, or remove it"
            )


def unknown_property(name: str) -> str | None:
    """``name`` described as an ``icesink.*`` table property icesink does not read, with the nearest name it
    does; None when it is not one (a name icesink reads or writes, or not under ``icesink.``)."""
    if (
        not name.startswith("icesink.")
        or name in USER_PROPERTIES
        or name == SOURCE_PROPERTY
        or name.startswith(WRITTEN_PREFIXES)
    ):
        return None
    if name in SNAPSHOT_SUMMARY_REFERENCE:
        return f"{name!r}, which icesink writes into snapshot summaries, not a table property it reads"
    nearest = difflib.get_close_matches(name, USER_PROPERTIES, n=1)
    hint = f"did you mean {nearest[0]!r}?" if nearest else f"the known ones: {', '.join(USER_PROPERTIES)}"
    return f"unknown icesink table property {name!r} ({hint})"


# --- the reference ----------------------------------------------------------------------------------------------------
# What each name means, for the documentation's generated reference (a test fails when a property icesink writes or
# reads has no entry here). The maintenance settings are described by MaintenancePolicy's fields.
SNAPSHOT_SUMMARY_REFERENCE: dict[str, str] = {
    JOB_ID_PROPERTY: "the job (stream) whose checkpoints the snapshot holds.",
    MAX_CHECKPOINT_PROPERTY: "the highest checkpoint of that job committed so far; a restart resumes after it.",
    STREAM_ID_PROPERTY: "the Spark query whose checkpoint history the checkpoint ids belong to.",
    CHECKPOINT_RANGE_PROPERTY: "``first-last``: the checkpoints the snapshot holds (several when a committer caught "
    "up on a backlog in one commit).",
    CONVERTED_PROPERTY: "the number of equality-delete files the commit turned into position deletes.",
    DISCARDED_PROPERTY: "checkpoints an operator discarded (``icesink checkpoints discard``) that this snapshot "
    "records as done.",
    MAINTENANCE_PROPERTY: "on a snapshot maintenance made: ``convert-equality-deletes``, ``compact`` or "
    "``rewrite-position-deletes``.",
    BASE_SNAPSHOT_PROPERTY: "the snapshot maintenance read; a stream commit made since then is checked against it.",
    MERGE_DROPPED_PROPERTY: "on a merge of position deletes: the positions it did not write again, named twice or "
    "naming a data file no longer live (added plus dropped positions are the removed ones).",
    COMMIT_ID_PROPERTY: "shared by the snapshots one atomic commit made in several tables, in one transaction of the "
    "catalog database.",
    WATERMARK_PROPERTY: "the event-time watermark of the stream (``event_time``) as of this snapshot, ISO 8601 with "
    "microseconds and zone: every row whose event time is below it has arrived, give or take the declared "
    "lateness. Never lower than an earlier snapshot's; maintenance snapshots carry it forward.",
    LATE_ROWS_PROPERTY: "rows of the snapshot's checkpoints whose event time was below the watermark their "
    "micro-batch started with (written all the same).",
    UNTIMED_ROWS_PROPERTY: "rows of the snapshot's checkpoints whose event time was null (they do not move the "
    "watermark).",
    EVENT_TIME_FIELD_PROPERTY: "the id of the table column the watermark is about (the stream's ``event_time``): "
    "partitions of a time transform of it (or identity on it) are done when the watermark reaches their end; "
    "partitions of another time column are not done by it.",
    PARTITIONS_DONE_PROPERTY: "the time partitions this snapshot's watermark made done (its end reached), as a JSON "
    'list of partition paths (``["ts_day=2026-11-25"]``); a partition first written at or below the watermark is '
    "done in the snapshot that adds it.",
}
TABLE_PROPERTY_REFERENCE: dict[str, str] = {
    TABLE_PROPERTY_PREFIX + "<job id>": "the job's committed-checkpoint marker again, as a table property, in the "
    "same metadata commit: snapshot expiry cannot remove it.",
    STREAM_TABLE_PROPERTY_PREFIX + "<job id>": "the Spark query the job's checkpoints belong to.",
    BRANCH_PROPERTY_PREFIX + "<branch>." + TABLE_PROPERTY_PREFIX + "<job id>": "the same two of a job committing "
    "to a branch other than ``main`` (``...stream-id.<job id>`` likewise).",
    WATERMARK_SPLITS_PREFIX + "<job id>": "the job's watermark and its marks per split of its input (JSON: "
    '``{"watermark": ISO 8601, "splits": {split values: [mark in microseconds, last seen in milliseconds]}}``), '
    "written in the same commit as its snapshots: a restarted stream goes on from it, and it answers for the "
    "watermark when expiry removed the snapshots (branch-prefixed as the marker is).",
    SUCCESS_FILE_PROPERTY: "``true``: once a partition is done, the committer writes a ``_SUCCESS`` file (JSON: table, "
    "partition, watermark, snapshot) in its directory, for tools that wait on files; readers never see it as data "
    "and ``icesink committer gc`` keeps it. At least once: a committer that dies first writes it after its next "
    "commit.",
    HTTP_POST_PROPERTY: "a URL the committer POSTs the same JSON to once a partition is done (at least once, retried "
    "after later commits until it answers 2xx; the snapshot id makes a repeat recognisable).",
    SOURCE_PROPERTY: "the source table a Debezium stream's table belongs to (JSON: ``connector``, ``database``, "
    "``schema``, ``table``), set when the stream creates the table or first writes it; a stream whose source table "
    "differs is refused before it writes.",
}
WRITER_PROPERTY_REFERENCE: dict[str, str] = {
    MAX_OPEN_FILES_PROPERTY: "the most Parquet files one write task keeps open at once (default 100, 1 or more). "
    "A task buffers its rows (at most 128 MiB, all partitions together), then writes each partition's share to "
    "its file; when it needs another file with this many open, it closes the least recently written one. Memory "
    "follows the buffer and the open files, not how many partitions a micro-batch touches; a task over more "
    "partitions than this writes a file per partition per 128 MiB of input, which maintenance compacts.",
}
# Iceberg's own table properties that icesink reads, and what it does with them.
ICEBERG_PROPERTY_REFERENCE: dict[str, str] = {
    "format-version": "Iceberg format version of a table a stream creates (2 by default); icesink writes format "
    "versions 1 and 2.",
    "write.target-file-size-bytes": "size of the data files both writers aim at, and of compaction's output "
    "(default 512 MiB).",
    "write.parquet.compression-codec": "codec of data files: zstd (default), snappy, gzip, lz4 (written as "
    "LZ4_RAW), brotli, uncompressed.",
    "write.parquet.compression-level": "level of that codec; unset, zstd is written at 3 and gzip at 6, as Iceberg "
    "Java's writer does.",
    "write.delete.parquet.compression-codec": "codec of delete files (default: the data files' codec).",
    "write.delete.parquet.compression-level": "level of the delete files' codec.",
    "write.parquet.bloom-filter-enabled.column.<name>": "``true``: data files get a Parquet bloom filter on the "
    "column (a field inside a struct by its dotted name); ``false``: they do not. Unset, key columns (the table's "
    "identifier fields, a stream's equality fields) get one: converting equality deletes probes it to skip row "
    "groups that cannot hold a deleted key, as Iceberg Java's readers do for filters on the column.",
    "write.parquet.bloom-filter-fpp.column.<name>": "false-positive probability of that column's bloom filter "
    "(default 0.01); each filter is sized by its row group's distinct values.",
    "write.data.path": "where data files go (default ``<table location>/data``); ``committer gc`` looks there too.",
    "write.metadata.path": "where metadata files go (default ``<table location>/metadata``); ``committer gc`` "
    "looks there too.",
    "write.avro.compression-codec": "codec of the manifests icesink writes (gzip by default).",
    "write.summary.partition-limit": "how many changed partitions a snapshot summary lists (0: none).",
    "commit.manifest-merge.enabled": "merge small manifests at commit, as Iceberg Java's appends do (true).",
    "commit.manifest.min-count-to-merge": "merge once a table has this many manifests (100).",
    "commit.manifest.target-size-bytes": "size merged manifests aim at (8 MiB).",
    "history.expire.max-snapshot-age-ms": "with ``expire_snapshots``/``--expire-snapshots``: snapshots older than "
    "this go in every commit (5 days).",
    "history.expire.min-snapshots-to-keep": "... except this many newest (1).",
}
