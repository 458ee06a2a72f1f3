"""The values a writer task hands to the committer.

``WriteResult`` is produced on an executor, travels to the driver as bytes in
the output of ``mapInArrow``, and is turned into Iceberg ``DataFile`` entries
there. It is deliberately free of pyiceberg types so that executors need
nothing but pyarrow and icesink's writer.

The byte encoding starts with a format version; decoders for every version
ever written are kept (tests hold saved bytes of each).
"""

from __future__ import annotations

import base64
import decimal
import enum
import json
from dataclasses import dataclass, field
from typing import Any

from icesink.errors import WriteResultError

FORMAT_VERSION = 1

PartitionValue = int | float | str | bool | bytes | decimal.Decimal | None


class FileContent(enum.IntEnum):
    """Iceberg's ``content`` of a file: what its rows mean."""

    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


@dataclass(frozen=True)
class FileRecord:
    """One Parquet file written by a task, with the metadata a manifest entry needs."""

    path: str
    content: FileContent
    record_count: int
    file_size_bytes: int
    spec_id: int
    partition: tuple[PartitionValue, ...]
    column_sizes: dict[int, int] = field(default_factory=dict)
    value_counts: dict[int, int] = field(default_factory=dict)
    null_value_counts: dict[int, int] = field(default_factory=dict)
    nan_value_counts: dict[int, int] = field(default_factory=dict)
    lower_bounds: dict[int, bytes] = field(default_factory=dict)
    upper_bounds: dict[int, bytes] = field(default_factory=dict)
    split_offsets: tuple[int, ...] = ()
    equality_ids: tuple[int, ...] | None = None
    # A position delete file whose rows all name one data file says which (readers skip it for others).
    referenced_data_file: str | None = None


@dataclass(frozen=True)
class SplitTimes:
    """What a task saw of the event times in one split of its rows (a stream with ``event_time``).

    ``split`` is the JSON list of the split's values (``'["orders", 3]'``; ``'[]'`` when the stream has one
    split); ``latest`` the largest event time in microseconds (None: every row's event time was null);
    ``late_rows`` the rows whose event time was below the watermark the micro-batch started with;
    ``untimed_rows`` those whose event time was null.
    """

    split: str
    latest: int | None
    rows: int
    late_rows: int = 0
    untimed_rows: int = 0


@dataclass(frozen=True)
class WriteResult:
    """Everything one task attempt wrote for one checkpoint."""

    checkpoint_id: int
    task_id: int
    attempt: int
    data_files: tuple[FileRecord, ...] = ()
    delete_files: tuple[FileRecord, ...] = ()
    event_times: tuple[SplitTimes, ...] = ()

    @property
    def record_count(self) -> int:
        return sum(f.record_count for f in self.data_files)


def encode_partition_value(value: PartitionValue) -> Any:
    """A partition value as JSON holds it, tagged where JSON has no such type (bytes, decimals)."""
    return _encode_value(value)


def decode_partition_value(value: Any) -> PartitionValue:
    """What :func:`encode_partition_value` wrote."""
    return _decode_value(value)


def _encode_value(value: PartitionValue) -> Any:
    # JSON has no bytes or decimals; tag them so they come back as the same type.
    if isinstance(value, bytes):
        return {"b": base64.b64encode(value).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return {"d": str(value)}
    return value


def _decode_value(value: Any) -> PartitionValue:
    if isinstance(value, dict):
        if "b" in value:
            return base64.b64decode(value["b"])
        if "d" in value:
            return decimal.Decimal(value["d"])
        raise WriteResultError(f"a task's write result holds an unknown partition value {value!r}; {_SAME_VERSION}")
    return value  # type: ignore[no-any-return]


def _encode_bounds(bounds: dict[int, bytes]) -> dict[str, str]:
    return {str(k): base64.b64encode(v).decode("ascii") for k, v in bounds.items()}


def _decode_bounds(bounds: dict[str, str]) -> dict[int, bytes]:
    return {int(k): base64.b64decode(v) for k, v in bounds.items()}


def _int_map(values: dict[str, int]) -> dict[int, int]:
    return {int(k): int(v) for k, v in values.items()}


def file_to_json(f: FileRecord) -> dict[str, Any]:
    """A file as JSON holds it (in a write result, and in the ledger row of the checkpoint that staged it)."""
    encoded = {
        "path": f.path,
        "content": int(f.content),
        "record_count": f.record_count,
        "file_size_bytes": f.file_size_bytes,
        "spec_id": f.spec_id,
        "partition": [_encode_value(v) for v in f.partition],
        "column_sizes": f.column_sizes,
        "value_counts": f.value_counts,
        "null_value_counts": f.null_value_counts,
        "nan_value_counts": f.nan_value_counts,
        "lower_bounds": _encode_bounds(f.lower_bounds),
        "upper_bounds": _encode_bounds(f.upper_bounds),
        "split_offsets": list(f.split_offsets),
        "equality_ids": None if f.equality_ids is None else list(f.equality_ids),
    }
    if f.referenced_data_file is not None:  # an optional key: records without one encode as before
        encoded["referenced_data_file"] = f.referenced_data_file
    return encoded


def file_from_json(d: dict[str, Any]) -> FileRecord:
    """What :func:`file_to_json` wrote."""
    return FileRecord(
        path=d["path"],
        content=FileContent(d["content"]),
        record_count=d["record_count"],
        file_size_bytes=d["file_size_bytes"],
        spec_id=d["spec_id"],
        partition=tuple(_decode_value(v) for v in d["partition"]),
        column_sizes=_int_map(d["column_sizes"]),
        value_counts=_int_map(d["value_counts"]),
        null_value_counts=_int_map(d["null_value_counts"]),
        nan_value_counts=_int_map(d["nan_value_counts"]),
        lower_bounds=_decode_bounds(d["lower_bounds"]),
        upper_bounds=_decode_bounds(d["upper_bounds"]),
        split_offsets=tuple(d["split_offsets"]),
        equality_ids=None if d["equality_ids"] is None else tuple(d["equality_ids"]),
        referenced_data_file=d.get("referenced_data_file"),
    )


def encode_write_result(result: WriteResult) -> bytes:
    """Serialise a result: one version byte, then JSON."""
    body = {
        "checkpoint_id": result.checkpoint_id,
        "task_id": result.task_id,
        "attempt": result.attempt,
        "data_files": [file_to_json(f) for f in result.data_files],
        "delete_files": [file_to_json(f) for f in result.delete_files],
    }
    if result.event_times:  # an optional key: results of streams without event_time encode as before
        body["event_times"] = [[t.split, t.latest, t.rows, t.late_rows, t.untimed_rows] for t in result.event_times]
    return bytes([FORMAT_VERSION]) + json.dumps(body, separators=(",", ":")).encode("utf-8")


_SAME_VERSION = "run the same icesink version on the driver and on every executor (PYSPARK_PYTHON)"


def decode_write_result(data: bytes) -> WriteResult:
    """Read bytes written by any released version of :func:`encode_write_result`."""
    if not data:
        raise WriteResultError(f"a task returned an empty write result; {_SAME_VERSION}")
    version = data[0]
    if version != 1:
        raise WriteResultError(
            f"a task's write result is format version {version}, which is newer than this icesink understands; "
            f"{_SAME_VERSION}"
        )
    body = json.loads(data[1:].decode("utf-8"))
    return WriteResult(
        checkpoint_id=body["checkpoint_id"],
        task_id=body["task_id"],
        attempt=body["attempt"],
        data_files=tuple(file_from_json(f) for f in body["data_files"]),
        delete_files=tuple(file_from_json(f) for f in body["delete_files"]),
        event_times=tuple(SplitTimes(*t) for t in body.get("event_times", ())),
    )
