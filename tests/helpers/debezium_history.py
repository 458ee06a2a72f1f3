"""Random Debezium histories of several source tables whose schemas change while the stream runs, and the
tables they must leave (a model).

Each source table is a topic of one to three Kafka partitions (a key always in the same one). Its columns
change type at the source at random points of its history, always in ways Iceberg can follow (a decimal's
precision, ``real`` to ``double precision``, ``smallint`` to ``integer`` to ``bigint``, a column added), and
its values reach the edges of their types (the largest decimal of a precision, float extremes and NaN, the first
and last dates, ``numeric`` without scale). Micro-batches take a random number of the next records of every
partition, so that records of an older schema on one partition land in the same micro-batch as records of a
newer one on another, or in a later one.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import random
import struct
from dataclasses import dataclass, field
from typing import Any

D = decimal.Decimal


def _f(column: str, kind: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": optional, **extra, "field": column}


def _decimal(name: str, precision: int, scale: int) -> dict[str, Any]:
    parameters = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    return _f(name, "bytes", name="org.apache.kafka.connect.data.Decimal", version=1, parameters=parameters)


def _single(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


@dataclass
class Column:
    """A source column: its Connect schema in each schema version (None: not there yet)."""

    name: str
    versions: list[dict[str, Any] | None]

    def schema(self, version: int) -> dict[str, Any] | None:
        return self.versions[min(version, len(self.versions) - 1)]


def _columns(rng: random.Random, versions: int) -> list[Column]:
    """The columns of a table, each with how it changes over ``versions`` schema versions."""
    changes = sorted(rng.sample(range(1, versions), k=min(versions - 1, 3))) if versions > 1 else []

    def evolving(name: str, kinds: list[dict[str, Any]]) -> Column:
        steps: list[dict[str, Any] | None] = []
        current = 0
        for version in range(versions):
            if current + 1 < len(kinds) and version in changes and rng.random() < 0.7:
                current += 1
            steps.append(kinds[current])
        return Column(name, steps)

    added_at = rng.randrange(1, versions) if versions > 1 else 0
    return [
        Column("id", [_f("id", "int64", False)] * versions),
        evolving("amount", [_decimal("amount", 10, 2), _decimal("amount", 14, 2), _decimal("amount", 20, 2)]),
        evolving("ratio", [_f("ratio", "float"), _f("ratio", "double")]),
        evolving("qty", [_f("qty", "int16"), _f("qty", "int32"), _f("qty", "int64")]),
        Column("note", [_f("note", "string")] * versions),
        Column(
            "loose",
            [
                {
                    **_f("loose", "struct", name="io.debezium.data.VariableScaleDecimal", version=1),
                    "fields": [_f("scale", "int32", False), _f("value", "bytes", False)],
                }
            ]
            * versions,
        ),
        Column("day", [_f("day", "int32", name="io.debezium.time.Date", version=1)] * versions),
        Column("at", [_f("at", "int64", name="io.debezium.time.MicroTimestamp", version=1)] * versions),
        Column("added", [None] * added_at + [_f("added", "string")] * (versions - added_at)),
    ]


def _value(rng: random.Random, column: str, schema: dict[str, Any]) -> tuple[Any, Any]:
    """(the value as Debezium's JSON holds it, the value the table must hold), edges included."""
    if rng.random() < 0.1 and column != "id":
        return None, None
    if column == "amount":
        precision = int(schema["parameters"]["connect.decimal.precision"])
        largest = 10**precision - 1
        unscaled = rng.choice([largest, -largest, 0, 1, -1, rng.randrange(-largest, largest)])
        raw = base64.b64encode(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True))
        return raw.decode(), D(unscaled).scaleb(-2)
    if column == "ratio":
        if schema["type"] == "float":
            number = rng.choice([3.4028234663852886e38, -1.1754943508222875e-38, 1.401298464324817e-45, 0.1, -2.5])
            return number, _single(number)
        number = rng.choice([1.7976931308621157e308, 5e-324, 0.1, 2.000000000001, float("nan"), float("-inf")])
        if math.isnan(number):
            return "NaN", number
        if math.isinf(number):
            return "-Infinity", number
        return number, number
    if column == "qty":
        bits = {"int16": 16, "int32": 32, "int64": 64}[schema["type"]]
        number = rng.choice([2 ** (bits - 1) - 1, -(2 ** (bits - 1)), 0, rng.randrange(-1000, 1000)])
        return number, number
    if column == "note":
        text = rng.choice(["", "ü %/\\'\"", "a" * 300, "line\nbreak", "\u00e9", "e\u0301"])
        return text, text
    if column == "loose":
        scale = rng.randrange(0, 20)
        unscaled = rng.randrange(-(10**25), 10**25)
        raw = base64.b64encode(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True))
        return {"scale": scale, "value": raw.decode()}, format(D(unscaled).scaleb(-scale), "f")
    if column == "day":
        day = rng.choice([datetime.date(1, 1, 1), datetime.date(9999, 12, 31), datetime.date(1969, 12, 31)])
        return (day - datetime.date(1970, 1, 1)).days, day
    if column == "at":
        moment = rng.choice(
            [
                datetime.datetime(1, 1, 1),
                datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
                datetime.datetime(1969, 12, 31, 23, 59, 59, 999999),
                datetime.datetime(2026, 11, 26, 12, 0, 0, 1),
            ]
        )
        return (moment - datetime.datetime(1970, 1, 1)) // datetime.timedelta(microseconds=1), moment
    if column == "added":
        text = rng.choice(["x", "ÿ"])
        return text, text
    raise AssertionError(column)


@dataclass
class TableHistory:
    source: str  # schema.table
    topic: str
    partitions: int
    columns: list[Column]
    logs: list[list[dict[str, Any]]] = field(default_factory=list)  # per partition, in offset order
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)  # the model: key → row


@dataclass
class History:
    tables: list[TableHistory]
    batches: list[list[dict[str, Any]]]  # the records of each micro-batch, as Kafka holds them

    def model(self, namespace: str) -> dict[str, dict[int, dict[str, Any]]]:
        return {f"{namespace}.{t.source.split('.')[1]}": t.rows for t in self.tables}


def generate(seed: int, tables: int = 3, events: int = 120, batches: int = 4) -> History:
    rng = random.Random(seed)
    histories = []
    for number in range(tables):
        name = f"t{number}"
        versions = rng.randrange(1, 5)
        table = TableHistory(f"public.{name}", f"dbz.public.{name}", rng.randrange(1, 4), _columns(rng, versions))
        table.logs = [[] for _ in range(table.partitions)]
        version_at = sorted(rng.randrange(events) for _ in range(versions - 1))
        for event in range(events):
            version = sum(1 for at in version_at if at <= event)
            _event(rng, table, version, event)
        histories.append(table)
    return History(histories, _batches(rng, histories, batches))


def _event(rng: random.Random, table: TableHistory, version: int, number: int) -> None:
    key = rng.randrange(1, 15)
    partition = key % table.partitions
    fields = [c.schema(version) for c in table.columns]
    present = [f for f in fields if f is not None]
    row_schema = {"type": "struct", "fields": present, "optional": True, "name": f"{table.topic}.Value"}
    schema = {
        "type": "struct",
        "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"}, _f("op", "string", False)],
        "optional": False,
        "name": f"{table.topic}.Envelope",
    }
    source = {"name": "dbz", "db": "shop", "schema": "public", "table": table.source.split(".")[1], "lsn": number}
    if key in table.rows and rng.random() < 0.2:
        payload = {"before": {"id": key}, "after": None, "op": "d", "source": source}
        del table.rows[key]
        _append(table, partition, key, payload, schema)
        _append(table, partition, key, None, schema)  # the tombstone
        return
    after: dict[str, Any] = {}
    row: dict[str, Any] = {}
    for column, schema_of in zip(table.columns, fields, strict=True):
        if schema_of is None:
            row[column.name] = None
            continue
        if column.name == "id":
            after["id"], row["id"] = key, key
            continue
        after[column.name], row[column.name] = _value(rng, column.name, schema_of)
    payload = {"before": None, "after": after, "op": "u" if key in table.rows else "c", "source": source}
    table.rows[key] = row
    _append(table, partition, key, payload, schema)


def _append(table: TableHistory, partition: int, key: int, payload: Any, schema: dict[str, Any]) -> None:
    key_json = {"schema": {"type": "struct", "fields": [_f("id", "int64", False)]}, "payload": {"id": key}}
    log = table.logs[partition]
    log.append(
        {
            "topic": table.topic,
            "partition": partition,
            "offset": len(log),
            "key": json.dumps(key_json),
            "value": None if payload is None else json.dumps({"schema": schema, "payload": payload}),
        }
    )


def _batches(rng: random.Random, tables: list[TableHistory], count: int) -> list[list[dict[str, Any]]]:
    """Cut every partition's log at random points: each micro-batch takes the next stretch of each."""
    batches: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for table in tables:
        for log in table.logs:
            cuts = sorted(rng.randrange(len(log) + 1) for _ in range(count - 1)) if log else []
            bounds = [0, *cuts, len(log)]
            for number in range(count):
                batches[number].extend(log[bounds[number] : bounds[number + 1]])
    for batch in batches:
        rng.shuffle(batch)  # partitions interleave at random; each keeps its own order (below)
        _restore_partition_order(batch)
    return batches


def _restore_partition_order(batch: list[dict[str, Any]]) -> None:
    """Interleave partitions at random but keep each partition's offsets in order (as Kafka delivers them)."""
    by_partition: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for record in batch:
        by_partition.setdefault((record["topic"], record["partition"]), []).append(record)
    for records in by_partition.values():
        records.sort(key=lambda r: r["offset"])
    order = [(r["topic"], r["partition"]) for r in batch]
    positions = {k: 0 for k in by_partition}
    for index, k in enumerate(order):
        batch[index] = by_partition[k][positions[k]]
        positions[k] += 1


def comparable(value: Any) -> Any:
    """A value as every reader's can be compared: NaN equal to itself, decimals and floats by value, text as is."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, D):
        return ("decimal", value.normalize() if value else D(0))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(value, datetime.datetime):
        return value.replace(tzinfo=None).isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value
