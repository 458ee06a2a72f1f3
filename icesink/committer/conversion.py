"""Whether a commit converts its checkpoint's equality deletes, and converting them.

A keyed stream's deletes are converted into position deletes at commit where the table allows it. Some
can never be committed as equality deletes, because a reader would not apply them to every row they
remove: keys inside structs (Iceberg Java 1.9 does not apply such deletes) and tables that hold data
files of another partition spec than the deletes' (readers apply a delete within its own spec only). Those are
converted whatever the row limit, and a checkpoint whose conversion cannot happen stays staged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from icesink.errors import ConfigError, DeleteConversionError
from icesink.iceberg.deletes import data_in_other_specs, nested_key_fields
from icesink.iceberg.scan import ManifestCache
from icesink.iceberg.snapshots import base_snapshot_id
from icesink.maintenance.convert import convert_for_commit
from icesink.maintenance.policy import COMMIT_SETTINGS, CONVERT_AT_COMMIT, MaintenancePolicy

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.iceberg.scan import ManifestCache
    from icesink.maintenance.convert import CommitConversion
    from icesink.table_ref import TableRef

log = logging.getLogger(__name__)


class CommitConversions:
    """Converts checkpoints' equality deletes at commit, keeping each table's manifests read between commits."""

    def __init__(self) -> None:
        self._manifests: dict[str, ManifestCache] = {}

    def convert(
        self, table: Table, ref: TableRef, job_id: str, checkpoint_id: int, deletes: list[DataFile]
    ) -> CommitConversion | None:
        """The checkpoint's equality deletes as position deletes on the head of ``ref``'s branch, or None to
        commit them as they are.

        Raises when they must be converted (see the module) and cannot be: nothing is committed then, and
        the checkpoint stays staged.
        """

        identifier = ref.identifier
        policy = MaintenancePolicy.of(table.properties, identifier, only=COMMIT_SETTINGS)
        where = f"table {ref}, job {job_id}, checkpoint {checkpoint_id}"
        head = base_snapshot_id(table.metadata, ref.branch)
        reasons = _reasons_to_convert(table, deletes, head)
        if not policy.convert_at_commit:
            if reasons:
                raise ConfigError(
                    f"{where}: {' and '.join(reasons)}, and the table now sets {CONVERT_AT_COMMIT}=false, so its "
                    "equality deletes would leave rows they delete visible. Nothing of the checkpoint was "
                    "committed and it stays staged: remove the property, and the committer commits it on its "
                    "next attempt"
                )
            return None
        try:
            cache = self._manifests.setdefault(identifier, ManifestCache())
            label = f"{job_id}-{checkpoint_id}"
            return convert_for_commit(table, deletes, policy, label, cache, required=bool(reasons), head=head)
        except (OSError, ValueError) as e:
            if reasons:
                raise DeleteConversionError(
                    f"{where}: converting its equality deletes to position deletes failed: {e}. They cannot be "
                    f"committed as they are: {' and '.join(reasons)}. Nothing was committed and the checkpoint "
                    "stays staged; the committer tries again, and succeeds once the table's files can be read"
                ) from e
            # Flat-keyed equality deletes are as correct, just slower to read.
            log.warning(
                "table=%s job=%s checkpoint=%d: equality deletes kept, converting them failed: %s",
                identifier,
                job_id,
                checkpoint_id,
                e,
            )
            return None


def _reasons_to_convert(table: Table, deletes: list[DataFile], head: int | None) -> list[str]:
    """Why these deletes must not be committed as equality deletes (none: they may)."""

    reasons = []
    nested = sorted({n for d in deletes for n in nested_key_fields(table.schema(), d.equality_ids or ())})
    if nested:
        reasons.append(
            f"they are keyed on fields inside structs ({', '.join(nested)}), which Iceberg Java 1.9 does not apply "
            "as equality deletes"
        )
    other_specs = data_in_other_specs(table, deletes, head)
    if other_specs:
        reasons.append(
            f"the table holds data files of another partition spec ({', '.join(map(str, other_specs))}) than its "
            "deletes', and readers apply an equality delete only to files of its own spec"
        )
    return reasons
