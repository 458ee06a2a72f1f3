"""The checkpoint protocol: whether a checkpoint a stream is about to write still needs writing.

Both sinks (``icesink.stream``'s micro-batch handler and ``writeStream.format("icesink")``) ask
:func:`admit` before writing or staging a checkpoint, and act on its one answer:

* ``WRITE``: neither the table nor the ledger has it; write the files and stage them;
* ``COMMITTED``: the table's marker says it is in (a replay after the commit): skip it;
* ``STAGED``: the ledger has it (a replay after staging, or an operator discarded it): never write it
  again; commit what is staged;
* ``REWIND`` and ``ANOTHER_STREAM`` are refusals, carried as the error to raise: the stream was restarted
  from an older checkpoint location, or another stream's checkpoints hold this job id (in the table's
  marker, in the ledger row of this checkpoint, or, on a stream's first checkpoint of a run, anywhere in
  the ledger).

The table, not the ledger, decides what is committed (see :mod:`icesink.iceberg.marker`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.catalog.checkpoints import CheckpointRow, CheckpointState, StreamIdentity
from icesink.catalog.ledger import Ledger
from icesink.errors import CheckpointRewindError, IcesinkError, JobIdConflictError
from icesink.iceberg.marker import committed_marker
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    from pyiceberg.table import Table


class Admission(enum.StrEnum):
    WRITE = "write"
    COMMITTED = "committed"
    STAGED = "staged"
    REWIND = "rewind"
    ANOTHER_STREAM = "another stream"


@dataclass(frozen=True)
class Decision:
    admission: Admission
    staged: CheckpointRow | None = None  # the ledger's row, for STAGED
    refusal: IcesinkError | None = None  # the error to raise, for REWIND and ANOTHER_STREAM

    @property
    def commit_staged(self) -> bool:
        """A re-delivered checkpoint whose staging survived: commit it (never write it again)."""
        return (
            self.admission == Admission.STAGED
            and self.staged is not None
            and (self.staged.state == CheckpointState.STAGED)
        )


def admit(
    ledger: Ledger,
    table: Table,
    ref: TableRef,
    job_id: str,
    checkpoint_id: int,
    stream: StreamIdentity,
    first: bool = False,
    known: Mapping[str, CheckpointRow] | None = None,
) -> Decision:
    """What to do with checkpoint ``checkpoint_id`` of ``job_id``, which ``stream`` is about to write.

    ``first``: the stream's first checkpoint in this run, when it also checks that the ledger holds no
    staged checkpoint of its job from another stream. ``known``: the ledger's rows of this checkpoint, by
    table, read before for several tables at once (:meth:`Ledger.get_many`). The marker is the one of
    ``ref``'s branch, the branch the checkpoint commits to.
    """
    identifier = ref.identifier
    marker = committed_marker(table.metadata, job_id, ref.branch)
    if marker is not None and marker.written_by_another_stream(stream.stream_id):
        error = another_stream_error(identifier, job_id, stream, f"stream {marker.stream_id}", marker.checkpoint_id)
        return Decision(Admission.ANOTHER_STREAM, refusal=error)
    if first:
        others = [s for s in ledger.streams_of_job(identifier, job_id) if stream.differs_from(s.stream_id)]
        if others:
            error = another_stream_error(identifier, job_id, stream, others[0].describe(), None)
            return Decision(Admission.ANOTHER_STREAM, refusal=error)
    if marker is not None and checkpoint_id < marker.checkpoint_id:
        return Decision(
            Admission.REWIND, refusal=_rewind_error(identifier, job_id, checkpoint_id, marker.checkpoint_id)
        )
    if marker is not None and checkpoint_id == marker.checkpoint_id:
        return Decision(Admission.COMMITTED)
    # An unreadable row too: the checkpoint is staged (or given up) and never written again; committing it
    # stops at it with what to do.
    row = known.get(identifier) if known is not None else ledger.get(identifier, job_id, checkpoint_id, True)
    if row is not None and stream.differs_from(row.stream_id):
        error = another_stream_error(identifier, job_id, stream, row.describe_stream(), checkpoint_id)
        return Decision(Admission.ANOTHER_STREAM, refusal=error)
    if row is not None:
        return Decision(Admission.STAGED, staged=row)
    return Decision(Admission.WRITE)


def another_stream_error(
    identifier: str, job_id: str, stream: StreamIdentity, holder: str, checkpoint_id: int | None
) -> JobIdConflictError:
    """A job id's checkpoints belong to one checkpoint history; this stream's is another one."""
    held = f"checkpoints up to {checkpoint_id}" if checkpoint_id is not None else "staged checkpoints"
    return JobIdConflictError(
        f"table {identifier}: job {job_id} already has {held} from {holder}, and this is {stream.describe()}: "
        "the checkpoint location is new (or emptied), or another stream runs with the same job id. Nothing of "
        "this batch was written. Either restart from that stream's checkpoint location to continue its job, or "
        "pass a job_id= of its own to this stream (or none: Spark's query id is then the job id)"
    )


def _rewind_error(identifier: str, job_id: str, checkpoint_id: int, committed: int) -> CheckpointRewindError:
    return CheckpointRewindError(
        f"table {identifier} already holds checkpoint {committed} of job {job_id}, but the stream "
        f"is at checkpoint {checkpoint_id}: it was restarted from an older copy of its checkpoint location. "
        f"Either restore the checkpoint location at or after checkpoint {committed} to continue, "
        "or pass a new job_id= to write this data again as a new job (rows already committed will then be "
        "written twice)"
    )
