"""What the ledger holds, as values: a staged checkpoint of one table, the files it staged, its fate, and what
operators see of jobs. Plain data, shared by staging, committing, gc and the CLI."""

from __future__ import annotations

import datetime
import enum
import json
from dataclasses import dataclass, field
from typing import Any

from icesink.errors import WriteResultError
from icesink.results import FileContent, FileRecord, file_from_json, file_to_json
from icesink.table_ref import MAIN_BRANCH, TableRef


class CheckpointState(enum.StrEnum):
    """Where a checkpoint is. A staged checkpoint whose commit stopped on an error shows as ``failed``
    (:attr:`CheckpointRow.status`) and stays staged, so that it commits once the cause is gone."""

    STAGED = "staged"
    COMMITTED = "committed"
    DISCARDED = "discarded"  # given up by an operator; never committed


@dataclass(frozen=True)
class StreamIdentity:
    """The stream a micro-batch comes from: Spark's query id, kept in its checkpoint location."""

    stream_id: str | None = None
    checkpoint_location: str | None = None

    def differs_from(self, other_stream_id: str | None) -> bool:
        """True when both are known and differ."""
        return self.stream_id is not None and other_stream_id is not None and self.stream_id != other_stream_id

    def describe(self) -> str:
        if self.stream_id is None:
            return "a stream that did not say who it is"
        where = f" (checkpoint location {self.checkpoint_location})" if self.checkpoint_location else ""
        return f"stream {self.stream_id}{where}"


@dataclass(frozen=True)
class StagedManifest:
    """One delta manifest file a checkpoint staged (as releases before inline files did): where it is, its
    length, and what it holds."""

    path: str
    length: int
    files: int
    records: int  # rows of data files, keys of delete files


@dataclass(frozen=True)
class InlineFiles:
    """Files a checkpoint staged in its ledger row itself, with no manifest file: how many, and their rows (of
    data files) or keys (of delete files). The files themselves are the row's :class:`StagedFiles`."""

    files: int
    records: int

    @staticmethod
    def of(records: tuple[FileRecord, ...]) -> InlineFiles:
        return InlineFiles(len(records), sum(r.record_count for r in records))


# The ledger keeps what a checkpoint staged as this encoding's JSON, its version inside: a release reads every
# earlier version and refuses a later one (rows staged before revision 0007 were rewritten into version 1 by that
# migration). Version 1 names delta manifest files; version 2 may say that the files are in the row itself.
DELTA_MANIFESTS_VERSION = 2
_CONTENTS = (("data", False), ("deletes", True))


def versioned_body(text: str, what: str, latest: int) -> dict[str, Any]:
    """The JSON object of a versioned ledger value (``{"version": n, ...}``), its version read: a
    :class:`ValueError` for anything else, or for a version a later release wrote."""
    try:
        body = json.loads(text)
    except RecursionError:
        raise ValueError(f"a value nested too deeply to be a {what} value: {text[:200]!r}") from None
    version = body.get("version") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"not a {what} value: {text[:200]!r}")
    if version > latest:
        raise ValueError(
            f"{what} encoding version {version}, written by a later icesink release (this one reads up to {latest})"
        )
    return body


Staged = StagedManifest | InlineFiles


@dataclass(frozen=True)
class DeltaManifests:
    """What one checkpoint staged for one table: its data files and its delete files (either may be absent),
    each in the ledger row itself (:class:`InlineFiles`) or, as releases before this one staged them, in a
    delta manifest file (:class:`StagedManifest`). The ledger keeps it as one versioned value (:meth:`encode`)."""

    data: Staged | None = None
    deletes: Staged | None = None

    def present(self) -> list[tuple[bool, Staged]]:
        """(holds deletes, what was staged) of each content there is."""
        return [(deletes, m) for deletes, m in ((False, self.data), (True, self.deletes)) if m is not None]

    @property
    def paths(self) -> list[str]:
        """The delta manifest files (only rows staged by releases before this one have any)."""
        return [m.path for _, m in self.present() if isinstance(m, StagedManifest)]

    @property
    def data_files(self) -> int:
        return self.data.files if self.data else 0

    @property
    def data_records(self) -> int:
        return self.data.records if self.data else 0

    @property
    def delete_files(self) -> int:
        return self.deletes.files if self.deletes else 0

    @property
    def delete_records(self) -> int:
        return self.deletes.records if self.deletes else 0

    def encode(self) -> str:
        """As the ledger keeps it: JSON with its version, each content by Iceberg's word for it. Manifest files
        alone are written as version 1, which releases before inline files read too."""
        staged = []
        for content, deletes in _CONTENTS:
            m = self.deletes if deletes else self.data
            if isinstance(m, StagedManifest):
                staged.append(
                    {"content": content, "path": m.path, "length": m.length, "files": m.files, "records": m.records}
                )
            elif m is not None:
                staged.append({"content": content, "files": m.files, "records": m.records})
        inline = any(isinstance(m, InlineFiles) for _, m in self.present())
        version = DELTA_MANIFESTS_VERSION if inline else 1
        return json.dumps({"version": version, "manifests": staged}, separators=(",", ":"))

    @staticmethod
    def decode(text: str) -> DeltaManifests:
        """Read what :meth:`encode` wrote, in any version up to this release's; :class:`ValueError` for anything
        else, down to a key it does not know (a value it half understood would commit half a checkpoint)."""
        body = versioned_body(text, "delta-manifests", DELTA_MANIFESTS_VERSION)
        version = body["version"]
        if set(body) != {"version", "manifests"} or not isinstance(body["manifests"], list):
            raise ValueError(f"a delta-manifests value of version {version} with keys {sorted(body)}: {text[:200]!r}")
        found: dict[str, Staged] = {}
        for m in body["manifests"]:
            content = m.get("content") if isinstance(m, dict) else None
            if content not in ("data", "deletes") or content in found:
                raise ValueError(f"a delta manifest icesink cannot read: {json.dumps(m)[:200]}")
            if _is_manifest(m):
                found[content] = StagedManifest(m["path"], m["length"], m["files"], m["records"])
            elif version >= 2 and _is_inline(m):
                found[content] = InlineFiles(m["files"], m["records"])
            else:
                raise ValueError(f"a delta manifest icesink cannot read: {json.dumps(m)[:200]}")
        return DeltaManifests(found.get("data"), found.get("deletes"))

    def flat(self) -> dict[str, Any]:
        """As flat fields (``data_manifest``, ``delete_files``, ...): what the CLI's JSON shows of a checkpoint
        (a manifest and its length only for rows staged in manifest files)."""
        values: dict[str, Any] = {}
        for kind, staged in (("data", self.data), ("delete", self.deletes)):
            manifest = staged if isinstance(staged, StagedManifest) else None
            values[f"{kind}_manifest"] = manifest.path if manifest else None
            values[f"{kind}_manifest_length"] = manifest.length if manifest else None
            values[f"{kind}_files"] = staged.files if staged else 0
            values[f"{kind}_records"] = staged.records if staged else 0
        return values


def _is_inline(entry: dict[str, Any]) -> bool:
    counts = [entry.get(k) for k in ("files", "records")]
    return set(entry) == {"content", "files", "records"} and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts
    )


def _is_manifest(entry: dict[str, Any]) -> bool:
    counts = [entry.get(k) for k in ("length", "files", "records")]
    return (
        set(entry) == {"content", "path", "length", "files", "records"}
        and isinstance(entry["path"], str)
        and bool(entry["path"])
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)
    )


# A checkpoint's own snapshot summary properties, as the ledger keeps them: JSON with its version inside, read
# like the delta manifests (every earlier version; a later one makes the row unreadable, not half understood).
SNAPSHOT_PROPERTIES_VERSION = 1


def encode_snapshot_properties(properties: tuple[tuple[str, str], ...]) -> str | None:
    """As the ledger keeps them; None (no column value) for none."""
    if not properties:
        return None
    body = {"version": SNAPSHOT_PROPERTIES_VERSION, "properties": dict(properties)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def decode_snapshot_properties(text: str | None) -> tuple[tuple[str, str], ...]:
    """Read what :func:`encode_snapshot_properties` wrote; :class:`ValueError` for anything else."""
    if text is None:
        return ()
    body = versioned_body(text, "snapshot-properties", SNAPSHOT_PROPERTIES_VERSION)
    properties = body.get("properties")
    if set(body) != {"version", "properties"} or not isinstance(properties, dict):
        raise ValueError(f"a snapshot-properties value of version 1 with keys {sorted(body)}: {text[:200]!r}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
        raise ValueError(f"snapshot properties that are not all strings: {text[:200]!r}")
    return tuple(sorted(properties.items()))


@dataclass(frozen=True, kw_only=True)
class StagedCheckpoint:
    """What a writer hands to the ledger for one checkpoint of one table.

    ``stream_id`` (Spark's query id, kept in the checkpoint location) and
    ``checkpoint_location`` say which stream wrote it: a replay of the same
    micro-batch comes from the same stream, another stream's checkpoint of the
    same job id never passes for one. ``schema_id`` is the table schema the
    files were written with, ``column_ids`` which field each DataFrame column went to.
    """

    identifier: str
    job_id: str
    checkpoint_id: int
    spec_id: int
    manifests: DeltaManifests = DeltaManifests()
    stream_id: str | None = None
    checkpoint_location: str | None = None
    schema_id: int | None = None
    column_ids: tuple[tuple[str, int], ...] | None = None  # DataFrame column -> the field it was written to
    # Committed with the job's other tables of the same checkpoint in one catalog transaction, or not at all.
    atomic: bool = False
    # Values the checkpoint carries into its snapshot's summary, under icesink's own markers (which win).
    snapshot_properties: tuple[tuple[str, str], ...] = ()
    branch: str = MAIN_BRANCH  # of the table, that the commit moves
    # The uuid of the table its files were written for: one dropped and created again under the name is another.
    table_uuid: str | None = None
    # Its files, where its manifests say they are in its row (InlineFiles): given to the ledger at staging, and
    # read back only by the queries that commit or keep them (None otherwise, and once committed).
    files: StagedFiles | None = field(default=None, compare=False)

    @property
    def ref(self) -> TableRef:
        return TableRef(self.identifier, self.branch)

    @property
    def manifest_paths(self) -> list[str]:
        return self.manifests.paths

    @property
    def has_deletes(self) -> bool:
        return self.manifests.delete_files > 0

    @property
    def stream(self) -> StreamIdentity:
        return StreamIdentity(self.stream_id, self.checkpoint_location)

    def describe_stream(self) -> str:
        """Which stream staged it, for error messages."""
        return self.stream.describe()


@dataclass(frozen=True, kw_only=True)
class CheckpointRow(StagedCheckpoint):
    """One ledger row: a staged checkpoint and its fate."""

    id: int
    state: CheckpointState
    snapshot_id: int | None
    staged_at: datetime.datetime
    committed_at: datetime.datetime | None
    manifests_deleted: bool
    error: str | None
    failed_at: datetime.datetime | None = None
    discarded_at: datetime.datetime | None = None
    discarded_by: str | None = None
    discard_reason: str | None = None
    commit_id: str | None = None  # shared by the tables of one atomic commit
    # Why its delta manifests cannot be read (a damaged row, or one a later release wrote); such a row is read
    # only where its manifests are not needed (to list it, discard it, know who staged it), with empty
    # manifests standing in for what it staged.
    unreadable: str | None = None

    @property
    def status(self) -> str:
        """``unreadable`` or ``failed`` for a staged checkpoint that cannot be committed as it is (an unreadable
        ledger row, an error at its last commit attempt); otherwise the state."""
        if self.state == CheckpointState.STAGED and self.unreadable:
            return "unreadable"
        return "failed" if self.state == CheckpointState.STAGED and self.error else self.state.value


@dataclass(frozen=True)
class JobLag:
    """How far the table is behind one job's staged checkpoints."""

    job_id: str
    pending: int
    failed: int
    committed: int
    last_staged_checkpoint: int | None
    last_committed_checkpoint: int | None
    last_committed_at: datetime.datetime | None
    oldest_pending_at: datetime.datetime | None
    lag_seconds: float


@dataclass(frozen=True)
class JobTable:
    """A table one job wrote, as its latest checkpoint of it says."""

    branch: str
    table_uuid: str | None  # the table of the name then (None: staged before the ledger recorded it)


@dataclass(frozen=True)
class JobTables:
    """One job (a stream) and the tables it writes: what waits, what failed, how far each table is."""

    job_id: str
    atomic: bool  # its tables are committed together
    tables: dict[str, int | None]  # table -> its last committed checkpoint of the job
    pending: int
    failed: int
    last_committed_checkpoint: int | None
    oldest_pending_at: datetime.datetime | None


# A staged checkpoint's files, in their ledger row (``staged_files``) until it is committed: versioned JSON like
# the other ledger values, each file as a write result holds it.
STAGED_FILES_VERSION = 1


@dataclass(frozen=True)
class StagedFiles:
    """The data files and delete files one checkpoint staged for one table, as its ledger row holds them until
    the checkpoint is committed (read only where they are committed or kept from gc: they may be many)."""

    data: tuple[FileRecord, ...] = ()
    deletes: tuple[FileRecord, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.data or self.deletes)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in (*self.data, *self.deletes)]

    def encode(self) -> str:
        body = {
            "version": STAGED_FILES_VERSION,
            "data": [file_to_json(f) for f in self.data],
            "deletes": [file_to_json(f) for f in self.deletes],
        }
        # ASCII, whatever the paths and partition values hold: any database encoding takes it.
        return json.dumps(body, separators=(",", ":"))

    @staticmethod
    def decode(text: str) -> StagedFiles:
        """Read what :meth:`encode` wrote; :class:`ValueError` for anything else, down to a file under the wrong
        content (a data file committed as a delete file would delete rows)."""
        body = versioned_body(text, "staged-files", STAGED_FILES_VERSION)
        if set(body) != {"version", "data", "deletes"}:
            raise ValueError(f"a staged-files value of version 1 with keys {sorted(body)}: {text[:200]!r}")
        try:
            data = tuple(file_from_json(f) for f in body["data"])
            deletes = tuple(file_from_json(f) for f in body["deletes"])
        except (KeyError, TypeError, ValueError, AttributeError, WriteResultError) as e:
            raise ValueError(f"a staged file icesink cannot read ({type(e).__name__}: {e})") from e
        for kind, files, allowed in (("data", data, _DATA), ("delete", deletes, _DELETES)):
            for f in files:
                if f.content not in allowed or not isinstance(f.path, str) or not f.path:
                    raise ValueError(f"a staged {kind} file icesink cannot read: {f.path!r}, content {f.content}")
        return StagedFiles(data, deletes)


_DATA = frozenset({FileContent.DATA})
_DELETES = frozenset({FileContent.POSITION_DELETES, FileContent.EQUALITY_DELETES})
