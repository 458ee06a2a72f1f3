"""The Spark task that decodes a micro-batch's Kafka records (on the executors), and the rows it gives.

Each record becomes one row of :data:`PARSED_DDL`: its change (source table, operation, key, row as JSON,
position), or, for a record that cannot be applied, why (source :data:`REJECTED`). A task sends each Connect
schema to the driver once, not with every record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icesink import fast_json
from icesink.debezium_events.stream_spec import Debezium

if TYPE_CHECKING:
    from icesink.debezium_events.decode import Change

# The decoded records: one row per change, or per record that cannot be applied (``source`` is REJECTED, ``row``
# says why). ``row`` is the change's row as JSON; ``key`` its key values (what the write is distributed by); the
# Kafka coordinates name a record in errors. ``raw_key`` and ``raw_value`` are the record's bytes, kept only where
# the write may still refuse it (a rejected record, or one without schemas, typed by the table as it is written).
PARSED_DDL = (
    "source string, op string, keys string, schema_id string, row_schema string, row string, key string, "
    "position string, topic string, partition int, offset long, raw_key binary, raw_value binary, shape string, "
    "source_ms long"
)


INPUT_COLUMNS = ("key", "value")


KAFKA_COLUMNS = ("topic", "partition", "offset")


REJECTED = ""  # the ``source`` of a record that cannot be applied (no source table is named so)


STOPPED = (
    "Nothing of the micro-batch was written. Fix the record at the source, or pass "
    "icesink.debezium(dead_letter='namespace.table') to set such records aside and go on"
)


def parse_task(
    columns: Sequence[str], keep_rejected: bool = False, spec: Debezium | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that decodes a micro-batch's records (``columns``: those present).

    A record that cannot be applied raises :class:`DecodeError`, or with ``keep_rejected`` becomes a row of
    source :data:`REJECTED`. ``spec`` names the tables in messages."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = _Rows(spec, keep_rejected)
        for batch in batches:
            records = batch.to_pydict()
            absent = [None] * batch.num_rows
            yield rows.of(
                records["key"],
                records["value"],
                records.get("topic") or absent,
                records.get("partition") or absent,
                records.get("offset") or absent,
            )

    return run


class _Rows:
    """One task's records as rows of :data:`PARSED_DDL`."""

    def __init__(self, spec: Debezium | None, keep_rejected: bool) -> None:
        from icesink.debezium_events.decode import Decoder

        self._decoder = Decoder(spec.identifier if spec is not None else None)
        self._keep_rejected = keep_rejected
        self._schemas_sent: set[str] = set()  # the driver needs each schema once a task, not once a record
        self._key_names: dict[tuple[str, ...], str] = {}

    def of(
        self, keys: list[Any], values: list[Any], topics: list[Any], partitions: list[Any], offsets: list[Any]
    ) -> pa.RecordBatch:
        from icesink.debezium_events.decode import DecodeError

        rows: list[tuple[Any, ...]] = []  # a tuple a record, in the order of _PARSED_TYPES: columns at the end
        for key, value, topic, partition, offset in zip(keys, values, topics, partitions, offsets, strict=True):
            try:
                change = self._decoder.decode(key, value, topic, partition, offset)
                if change is not None:
                    rows.append(self._row(change, topic, partition, offset, key, value))
            except Exception as e:  # with a dead-letter table, whatever a record makes decoding raise
                if not self._keep_rejected:
                    if isinstance(e, DecodeError):
                        raise DecodeError(f"{e}. {STOPPED}") from None
                    raise
                error = str(e) if isinstance(e, DecodeError) else f"{type(e).__name__}: {e}"
                rows.append((REJECTED, "", "[]", "", "", error, "", "", topic, partition, offset, key, value, "", None))
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(_PARSED_TYPES)
        return pa.record_batch(
            [pa.array(c, t) for c, (_, t) in zip(columns, _PARSED_TYPES, strict=True)],
            names=[n for n, _ in _PARSED_TYPES],
        )

    def _row(self, change: Change, topic: Any, partition: Any, offset: Any, key: Any, value: Any) -> tuple[Any, ...]:
        exact = change.row_text is not None
        # The row first: a row that cannot be written (nested deeper than Python's recursion allows) is a
        # rejected record, and must not have marked its schema as sent.
        row_text = change.row_text if exact else fast_json.dumps(change.row)
        schema_text = ""
        if change.schema_id and change.schema_id not in self._schemas_sent:
            schema_text = json.dumps(change.row_schema)
            self._schemas_sent.add(change.schema_id)
        keys_json = self._key_names.get(change.key_names)
        if keys_json is None:
            keys_json = self._key_names[change.key_names] = json.dumps(change.key_names)
        return (
            change.source.key,
            change.op,
            keys_json,
            change.schema_id,
            schema_text,
            row_text,
            repr([change.row.get(k) for k in change.key_names]),  # what the write distributes by (canonical)
            change.position,
            topic,
            partition,
            offset,
            key if exact else None,  # a record without schemas may still be refused by the write: keep its bytes
            value if exact else None,
            json.dumps(list(change.row)) if exact else "",
            change.source_ms,
        )


_PARSED_TYPES = (
    ("source", pa.string()),
    ("op", pa.string()),
    ("keys", pa.string()),
    ("schema_id", pa.string()),
    ("row_schema", pa.string()),
    ("row", pa.string()),
    ("key", pa.string()),
    ("position", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("raw_key", pa.binary()),
    ("raw_value", pa.binary()),
    ("shape", pa.string()),
    ("source_ms", pa.int64()),
)
