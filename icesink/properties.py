"""Every name icesink writes into a table's metadata, in one place.

Snapshot summary properties say which job and checkpoints a snapshot holds, and
what maintenance made it; table properties hold the committed-checkpoint marker
where snapshot expiry cannot remove it, and the per-table settings of
:mod:`icesink.maintenance.policy` (their defaults, ranges and meaning live there).
"""

from __future__ import annotations

# --- snapshot summary -----------------------------------------------------------------------------------------------
JOB_ID_PROPERTY = "icesink.job-id"
MAX_CHECKPOINT_PROPERTY = "icesink.max-committed-checkpoint-id"
STREAM_ID_PROPERTY = "icesink.stream-id"  # the Spark query whose checkpoint history the ids belong to
CHECKPOINT_RANGE_PROPERTY = "icesink.checkpoint-ids"  # "first-last" of the checkpoints in the snapshot
CONVERTED_PROPERTY = "icesink.converted-equality-deletes"
DISCARDED_PROPERTY = "icesink.discarded-checkpoints"
MAINTENANCE_PROPERTY = "icesink.maintenance"  # which maintenance made the snapshot: convert or compact
BASE_SNAPSHOT_PROPERTY = "icesink.maintenance.base-snapshot-id"
# Shared by the snapshots one atomic commit made in several tables (one transaction of the catalog).
COMMIT_ID_PROPERTY = "icesink.commit-id"

# --- table properties -----------------------------------------------------------------------------------------------
# The marker again, per job, in the same atomic metadata commit (``<prefix><job id>``).
TABLE_PROPERTY_PREFIX = "icesink.max-committed-checkpoint-id."
STREAM_TABLE_PROPERTY_PREFIX = "icesink.stream-id."
# Settings a user sets on the table, by MaintenancePolicy attribute.
POLICY_PROPERTIES = {
    "convert_at_commit": "icesink.equality-deletes.convert-at-commit",
    "convert_max_rows": "icesink.equality-deletes.convert-max-rows",
    "equality_delete_files": "icesink.maintain.equality-delete-files",
    "min_input_files": "icesink.maintain.min-input-files",
    "min_file_ratio": "icesink.maintain.min-file-ratio",
    "delete_file_threshold": "icesink.maintain.delete-file-threshold",
    "min_commits": "icesink.maintain.min-commits",
    "max_group_bytes": "icesink.maintain.max-group-bytes",
    "max_seconds": "icesink.maintain.max-seconds",
}
