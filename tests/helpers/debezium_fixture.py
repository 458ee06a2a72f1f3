"""Debezium change events as Kafka holds them, and the tables they should leave (a model).

No broker here: the events are written as JSON lines of ``{topic, partition, offset, key, value}``,
key and value being the strings Kafka Connect's JsonConverter writes (with the ``schema`` envelope,
or, for one table, without). Spark reads them as it would read Kafka's columns.

Tables (one history, seeded):

* ``public.customers`` (PostgreSQL): key ``id``; a column for every logical type; ``email`` added at
  the source midway (events before it lack the field); updates, deletes whose ``before`` holds only
  the key, tombstones after deletes, snapshot reads (``r``).
* ``shop.order_lines`` (MySQL): a composite key ``(order_id, line)``, MySQL source positions.
* ``public.notes`` (PostgreSQL, schemas disabled): plain JSON values.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

D = decimal.Decimal
UTC = datetime.UTC


def _f(column: str, kind: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": optional, **extra, "field": column}


def _logical(column: str, kind: str, logical: str, **parameters: str) -> dict[str, Any]:
    extra: dict[str, Any] = {"name": logical, "version": 1}
    if parameters:
        extra["parameters"] = parameters
    return _f(column, kind, **extra)


CUSTOMER_FIELDS = [
    _f("id", "int32", optional=False),
    _f("name", "string"),
    _logical(
        "balance", "bytes", "org.apache.kafka.connect.data.Decimal", **{"scale": "2", "connect.decimal.precision": "10"}
    ),
    _logical(
        "big_amount",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        **{"scale": "9", "connect.decimal.precision": "38"},
    ),
    {
        **_f("loose", "struct", name="io.debezium.data.VariableScaleDecimal"),
        "fields": [_f("scale", "int32", False), _f("value", "bytes", False)],
    },
    _logical("born", "int32", "io.debezium.time.Date"),
    _logical("born_connect", "int32", "org.apache.kafka.connect.data.Date"),
    _logical("wake", "int64", "io.debezium.time.MicroTime"),
    _logical("wake_ms", "int32", "io.debezium.time.Time"),
    _logical("updated", "int64", "io.debezium.time.MicroTimestamp"),
    _logical("updated_ms", "int64", "io.debezium.time.Timestamp"),
    _logical("updated_ns", "int64", "io.debezium.time.NanoTimestamp"),
    _logical("created", "string", "io.debezium.time.ZonedTimestamp"),
    _logical("uid", "string", "io.debezium.data.Uuid"),
    _logical("doc", "string", "io.debezium.data.Json"),
    _logical("mood", "string", "io.debezium.data.Enum", allowed="happy,sad"),
    _f("tiny", "int8"),
    _f("small", "int16"),
    _f("big", "int64"),
    _f("ratio", "float"),
    _f("score", "double"),
    _f("active", "boolean"),
    _f("blob", "bytes"),
    {**_f("tags", "array"), "items": {"type": "string", "optional": True}},
    {
        **_f("attrs", "map"),
        "keys": {"type": "string", "optional": False},
        "values": {"type": "string", "optional": True},
    },
    {**_f("address", "struct"), "fields": [_f("street", "string"), _f("zip", "int32")]},
]
EMAIL = _f("email", "string")
LINE_FIELDS = [_f("order_id", "int64", False), _f("line", "int32", False), _f("sku", "string"), _f("qty", "int32")]
# Source table -> the table icesink writes (order lines through a mapping, to a hostile name).
TABLES = {
    "public.customers": "inventory.customers",
    "shop.order_lines": "inventory.order lines ü%",
    "public.notes": "inventory.notes",
}
MAPPING = {"shop.order_lines": TABLES["shop.order_lines"]}


def _unscaled(value: D, scale: int) -> str:
    unscaled = int(value.scaleb(scale))
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def _micros(moment: datetime.datetime) -> int:
    return (moment - datetime.datetime(1970, 1, 1)) // datetime.timedelta(microseconds=1)


def _days(day: datetime.date) -> int:
    return (day - datetime.date(1970, 1, 1)).days


@dataclass
class History:
    """The events (as Kafka records, in files) and the rows each table should hold after them."""

    files: list[list[dict[str, Any]]] = field(default_factory=list)
    model: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.offsets: dict[tuple[str, int], int] = {}
        self.lsn = 24_000_000
        self.binlog = 1000
        self.email_added = False

    # --- values ---------------------------------------------------------------------------------------------------
    def customer(self, key: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the event's ``after`` as Debezium writes it, the row as icesink reads it back)."""
        rng = self.rng
        nullable = rng.random() < 0.15
        balance = D(rng.randint(-99_999_999, 99_999_999)).scaleb(-2)
        big = D(rng.choice([0, 1, -1, 10**29 - 1, -(10**29 - 1), rng.randint(-(10**20), 10**20)])).scaleb(-9)
        loose_scale = rng.randint(0, 12)
        loose = D(rng.randint(-(10**15), 10**15)).scaleb(-loose_scale)
        born = datetime.date(1900, 1, 1) + datetime.timedelta(days=rng.randint(0, 60_000))
        wake = rng.randint(0, 86_400 * 10**6 - 1)
        updated = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=rng.randint(-(10**15), 4 * 10**15))
        updated_ms = updated.replace(microsecond=updated.microsecond // 1000 * 1000)
        created = datetime.datetime(2000, 1, 1, tzinfo=UTC) + datetime.timedelta(microseconds=rng.randint(0, 10**15))
        offset_hours = rng.choice([0, 2, -5])
        created_text = created.astimezone(datetime.timezone(datetime.timedelta(hours=offset_hours))).isoformat()
        if offset_hours == 0:
            created_text = created.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"  # PostgreSQL pads to the precision
        uid = uuid.UUID(int=rng.getrandbits(128))
        score = rng.choice([1.5, -0.0, float("nan"), float("inf"), float("-inf"), rng.random() / 7])
        blob = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 5)))
        tags = rng.choice([[], ["a", None, "ü"], None])
        attrs = rng.choice([{}, {"k": "v", "n": None}, None])
        address = rng.choice([None, {"street": "Main 1 %/x", "zip": None}, {"street": None, "zip": 12345}])
        event = {
            "id": key,
            "name": rng.choice(["Anne", "Bé %/ü", "", None]),
            "balance": _unscaled(balance, 2),
            "big_amount": _unscaled(big, 9),
            "loose": {"scale": loose_scale, "value": _unscaled(loose, loose_scale)},
            "born": _days(born),
            "born_connect": _days(born),
            "wake": wake,
            "wake_ms": wake // 1000,
            "updated": _micros(updated),
            "updated_ms": _micros(updated_ms) // 1000,
            "updated_ns": _micros(updated) * 1000,
            "created": created_text,
            "uid": str(uid),
            "doc": json.dumps({"a": [1, None]}),
            "mood": rng.choice(["happy", "sad"]),
            "tiny": rng.randint(-128, 127),
            "small": rng.randint(-32768, 32767),
            "big": rng.choice([2**63 - 1, -(2**63), 0]),
            "ratio": 0.5,
            "score": score
            if score == score and abs(score) != float("inf")
            else str(score).replace("inf", "Infinity").replace("nan", "NaN"),
            "active": rng.random() < 0.5,
            "blob": base64.b64encode(blob).decode(),
            "tags": tags,
            "attrs": attrs,
            "address": address,
        }
        row = {
            "id": key,
            "name": event["name"],
            "balance": balance,
            "big_amount": big,
            "loose": format(loose, "f"),
            "born": born,
            "born_connect": born,
            "wake": wake,
            "wake_ms": wake // 1000 * 1000,
            "updated": updated,
            "updated_ms": updated_ms,
            "updated_ns": updated,
            "created": created,
            "uid": str(uid),
            "doc": event["doc"],
            "mood": event["mood"],
            "tiny": event["tiny"],
            "small": event["small"],
            "big": event["big"],
            "ratio": 0.5,
            "score": score,
            "active": event["active"],
            "blob": blob,
            "tags": tags,
            "attrs": sorted(attrs.items()) if attrs is not None else None,
            "address": address,
        }
        if nullable:
            for name in ("name", "balance", "born", "updated", "created", "uid", "blob", "tags", "address"):
                event[name] = None
                row[name] = None
        if self.email_added:
            event["email"] = row["email"] = rng.choice([f"c{key}@example.com", None])
        return event, row

    # --- records --------------------------------------------------------------------------------------------------
    def record(
        self,
        topic: str,
        key: dict[str, Any],
        key_fields: list[dict[str, Any]],
        value: dict[str, Any] | None,
        schemas: bool,
    ) -> dict[str, Any]:
        partition = sum(map(ord, json.dumps(key, sort_keys=True))) % 2  # a key stays in one partition
        offset = self.offsets.get((topic, partition), 0)
        self.offsets[(topic, partition)] = offset + 1
        key_json = (
            key
            if not schemas
            else {
                "schema": {"type": "struct", "fields": key_fields, "optional": False, "name": f"{topic}.Key"},
                "payload": key,
            }
        )
        return {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "key": json.dumps(key_json),
            "value": json.dumps(value) if value is not None else None,
        }

    def envelope(
        self, topic: str, fields: list[dict[str, Any]], payload: dict[str, Any], source: dict[str, Any], schemas: bool
    ) -> dict[str, Any]:
        payload = {**payload, "source": source, "transaction": None, "ts_ms": 1_710_000_000_000}
        if not schemas:
            return payload
        row = {"type": "struct", "fields": fields, "optional": True, "name": f"{topic}.Value"}
        schema = {
            "type": "struct",
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                {
                    "type": "struct",
                    "fields": [_f("table", "string", False)],
                    "optional": False,
                    "name": "io.debezium.connector.postgresql.Source",
                    "field": "source",
                },
                _f("op", "string", False),
                _f("ts_ms", "int64"),
            ],
            "optional": False,
            "name": f"{topic}.Envelope",
            "version": 2,
        }
        return {"schema": schema, "payload": payload}

    def pg_source(self, schema: str, table: str) -> dict[str, Any]:
        self.lsn += self.rng.randint(1, 50)
        return {
            "version": "3.1.0.Final",
            "connector": "postgresql",
            "name": "dbserver1",
            "ts_ms": 1,
            "snapshot": "false",
            "db": "shop",
            "sequence": json.dumps([str(self.lsn - 100), str(self.lsn)]),
            "schema": schema,
            "table": table,
            "txId": 5,
            "lsn": self.lsn,
        }

    def mysql_source(self, table: str) -> dict[str, Any]:
        self.binlog += self.rng.randint(1, 50)
        return {
            "version": "3.1.0.Final",
            "connector": "mysql",
            "name": "dbserver2",
            "ts_ms": 1,
            "snapshot": "false",
            "db": "shop",
            "table": table,
            "server_id": 1,
            "file": "mysql-bin.000003",
            "pos": self.binlog,
            "row": 0,
        }


def generate(seed: int, files: int = 4, events_per_file: int = 30) -> History:
    """A seeded history of the three tables, split into ``files`` micro-batches."""
    g = Generator(seed)
    history = History(model={t: {} for t in TABLES.values()})
    customers = history.model["inventory.customers"]
    lines = history.model[TABLES["shop.order_lines"]]
    notes = history.model["inventory.notes"]
    for number in range(files):
        if number == files // 2:
            g.email_added = True  # ALTER TABLE customers ADD COLUMN email at the source
            for row in customers.values():
                row.setdefault("email", None)
        batch: list[dict[str, Any]] = []
        for _ in range(events_per_file):
            kind = g.rng.random()
            if kind < 0.55:
                _customer_event(g, batch, customers, number == 0)
            elif kind < 0.85:
                _line_event(g, batch, lines)
            else:
                _note_event(g, batch, notes)
        history.files.append(batch)
    return history


def _customer_event(
    g: Generator, batch: list[dict[str, Any]], model: dict[tuple[Any, ...], dict[str, Any]], snapshot: bool
) -> None:
    topic = "dbserver1.public.customers"
    fields = CUSTOMER_FIELDS + ([EMAIL] if g.email_added else [])
    key_fields = [_f("id", "int32", False)]
    key = g.rng.randint(1, 12)
    source = g.pg_source("public", "customers")
    if key in model and g.rng.random() < 0.3:
        # PostgreSQL REPLICA IDENTITY DEFAULT: the delete's before holds the key, the rest is null or a placeholder.
        before = {f["field"]: None for f in fields} | {"id": key, "name": ""}
        value = g.envelope(topic, fields, {"before": before, "after": None, "op": "d"}, source, True)
        batch.append(g.record(topic, {"id": key}, key_fields, value, True))
        batch.append(g.record(topic, {"id": key}, key_fields, None, True))  # the tombstone
        del model[(key,)]
        return
    event, row = g.customer(key)
    op = "r" if snapshot else ("u" if key in model else "c")
    value = g.envelope(topic, fields, {"before": None, "after": event, "op": op}, source, True)
    batch.append(g.record(topic, {"id": key}, key_fields, value, True))
    model[(key,)] = row


def _line_event(g: Generator, batch: list[dict[str, Any]], model: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    topic = "dbserver2.shop.order_lines"
    key = {"order_id": g.rng.choice([1, 2, 2**40]), "line": g.rng.randint(1, 3)}
    key_fields = [_f("order_id", "int64", False), _f("line", "int32", False)]
    source = g.mysql_source("order_lines")
    model_key = (key["order_id"], key["line"])
    if model_key in model and g.rng.random() < 0.3:
        before = {**model[model_key]}
        value = g.envelope(topic, LINE_FIELDS, {"before": before, "after": None, "op": "d"}, source, True)
        batch.append(g.record(topic, key, key_fields, value, True))
        del model[model_key]
        return
    row = {**key, "sku": g.rng.choice(["A-1", "Ω"]), "qty": g.rng.choice([1, None, 7])}
    op = "u" if model_key in model else "c"
    value = g.envelope(topic, LINE_FIELDS, {"before": None, "after": row, "op": op}, source, True)
    batch.append(g.record(topic, key, key_fields, value, True))
    model[model_key] = row


def _note_event(g: Generator, batch: list[dict[str, Any]], model: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    """A table whose connector writes no schemas: values are plain JSON."""
    topic = "dbserver1.public.notes"
    key = g.rng.randint(1, 4)
    source = g.pg_source("public", "notes")
    row = {"id": key, "text": g.rng.choice(["hello", "ünï %/", ""]), "stars": g.rng.randint(0, 5)}
    value = g.envelope(
        topic, [], {"before": None, "after": row, "op": "c" if (key,) not in model else "u"}, source, False
    )
    batch.append(g.record(topic, {"id": key}, [], value, False))
    model[(key,)] = row


def write(history: History, directory: Any) -> None:
    """One JSON-lines file per micro-batch, named and timed so Spark takes them in order."""
    import os

    directory.mkdir(parents=True, exist_ok=True)
    for number, batch in enumerate(history.files):
        path = directory / f"part-{number:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch), encoding="utf-8")
        os.utime(path, (1_750_000_000 + number, 1_750_000_000 + number))


def records(history: History) -> Iterator[dict[str, Any]]:
    for batch in history.files:
        yield from batch


# --- single records, for tests that build their micro-batches by hand -------------------------------------------------
KAFKA_SCHEMA = "topic string, partition int, offset long, key string, value string"


def record(
    topic: str,
    partition: int,
    offset: int,
    key: dict[str, Any],
    after: dict[str, Any] | None,
    fields: list[dict[str, Any]] | None,
    op: str = "c",
) -> dict[str, Any]:
    source = {"schema": topic.split(".")[1], "table": topic.split(".")[2]}
    payload = {"before": None if op != "d" else key, "after": after, "op": op, "source": source}
    if fields is None:  # schemas disabled
        value: Any = payload
    else:
        row = {"type": "struct", "fields": fields, "optional": True, "name": f"{topic}.Value"}
        value = {
            "schema": {
                "type": "struct",
                "fields": [{**row, "field": "before"}, {**row, "field": "after"}],
                "optional": False,
            },
            "payload": payload,
        }
    return {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": json.dumps(key),
        "value": json.dumps(value),
    }


def write_batches(directory: Any, batches: list[list[dict[str, Any]]]) -> None:
    import os

    directory.mkdir(parents=True, exist_ok=True)
    for number, batch in enumerate(batches):
        path = directory / f"part-{number:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch), encoding="utf-8")
        os.utime(path, (1_750_000_000 + number, 1_750_000_000 + number))


def run_stream(spark: Any, config: Any, tmp_path: Any, spec: Any) -> None:
    import icesink

    events = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    icesink.stream(
        events, tables=spec, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True}, catalog=config
    ).awaitTermination()
