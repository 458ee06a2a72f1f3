"""Change streams of nested rows: keyed streams whose nested input evolves partway, and keys on fields inside
structs (converted at commit, since Iceberg Java does not apply such equality deletes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from tests.helpers.changes import write_checkpoint_file
from tests.helpers.outcomes import iceberg_rust_sql, read_many_with_iceberg_java, read_with_duckdb

# --- a keyed change stream with nested columns whose input gains fields partway --------------------------------------

CDC = "shop.profiles"
_INFO_V1 = pa.struct(
    [("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64())), ("score", pa.int32())]
)
_INFO_V2 = pa.struct(
    [
        ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int64())),
        ("score", pa.int64()),  # widened
        ("note", pa.string()),  # a new nested field
    ]
)
INPUT_V1 = pa.schema(
    [("region", pa.string()), ("id", pa.int64()), ("info", _INFO_V1), ("seq", pa.int64()), ("op", pa.string())]
)
INPUT_V2 = pa.schema(
    [
        ("region", pa.string()),
        ("id", pa.int64()),
        ("info", _INFO_V2),
        ("channel", pa.string()),  # a new top-level column
        ("seq", pa.int64()),
        ("op", pa.string()),
    ]
)
DDL_V1 = (
    "region string, id long, info struct<tags: array<string>, attrs: map<string, bigint>, score: int>, "
    "seq long, op string"
)
DDL_V2 = (
    "region string, id long, info struct<tags: array<string>, attrs: map<string, bigint>, score: bigint, "
    "note: string>, channel string, seq long, op string"
)


def _random_changes(rng: Any, checkpoint: int, evolved: bool) -> list[dict[str, Any]]:
    changes = []
    for n in range(30):
        info: dict[str, Any] | None = {
            "tags": rng.choice([None, [], [f"t{n}"], ["x", f"y{checkpoint}"]]),
            "attrs": rng.choice([None, [], [("a", n)], [("a", 1), ("b", None)]]),
            "score": rng.randrange(-5, 5) * (3_000_000_000 if evolved else 1),
        }
        if evolved:
            info["note"] = rng.choice([None, f"note {checkpoint}-{n}"])
        change = {
            "region": rng.choice(["eu", "us"]),
            "id": rng.randrange(10),
            "info": rng.choice([info, info, info, None]),
            "seq": checkpoint * 100 + rng.randrange(15),
            "op": rng.choices(["I", "U", "D"], weights=[4, 4, 2])[0],
        }
        if evolved:
            change["channel"] = rng.choice([None, "web", "app"])
        changes.append(change)
    return changes


class _NestedModel:
    """The latest row per key; rows written before the evolution read back with nulls for the new fields."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}

    def apply(self, changes: list[dict[str, Any]]) -> None:
        latest: dict[tuple[str, int], dict[str, Any]] = {}
        for _, change in sorted(enumerate(changes), key=lambda p: (p[1]["seq"], p[0])):
            latest[(change["region"], change["id"])] = change
        for key, change in latest.items():
            if change["op"] == "D":
                self.rows.pop(key, None)
            else:
                self.rows[key] = {k: v for k, v in change.items() if k != "op"}

    def expected(self) -> list[dict[str, Any]]:
        return [_full(self.rows[k]) for k in sorted(self.rows)]


def _full(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the evolved table reads it: every column and nested field present, maps as sorted pairs."""
    info = row["info"]
    if info is not None:
        attrs = info["attrs"]
        info = {
            "tags": info["tags"],
            "attrs": None if attrs is None else sorted((tuple(p) for p in attrs), key=lambda p: p[0]),
            "score": info["score"],
            "note": info.get("note"),
        }
    return {"region": row["region"], "id": row["id"], "info": info, "seq": row["seq"], "channel": row.get("channel")}


def _table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows from a reader, spelled as the model spells them (columns of the model, maps as sorted pairs)."""
    out = []
    for row in rows:
        info = row.get("info")
        if info is not None:
            attrs = info.get("attrs")
            if isinstance(attrs, dict):
                attrs = list(attrs.items())
            info = {
                "tags": info.get("tags"),
                "attrs": None if attrs is None else sorted((tuple(p) for p in attrs), key=lambda p: p[0]),
                "score": info.get("score"),
                "note": info.get("note"),
            }
        out.append(
            {"region": row["region"], "id": row["id"], "info": info, "seq": row["seq"], "channel": row.get("channel")}
        )
    return sorted(out, key=lambda r: (r["region"], r["id"]))


@pytest.mark.spark
@pytest.mark.interop
def test_a_nested_cdc_stream_that_evolves_partway_equals_the_model_for_every_reader(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    import random

    rng = random.Random(31)
    model = _NestedModel()
    for checkpoint in range(5):
        evolved = checkpoint >= 3
        changes = _random_changes(rng, checkpoint, evolved)
        write_checkpoint_file(tmp_path / "in", checkpoint, changes, INPUT_V2 if evolved else INPUT_V1)
        model.apply(changes)
        df = spark.readStream.schema(DDL_V2 if evolved else DDL_V1).option("maxFilesPerTrigger", 1)
        icesink.stream(
            df.parquet(str(tmp_path / "in")),
            table=CDC,
            checkpoint_location=str(tmp_path / "ckpt"),
            trigger={"availableNow": True},
            create_table=True,
            equality_fields=["region", "id"],
            op_column="op",
            sequence_by="seq",
            evolve_schema=True,
            catalog=sqlite_catalog,
        ).awaitTermination()
        assert _table_rows(icesink.read(CDC, catalog=sqlite_catalog).to_pylist()) == model.expected(), checkpoint

    table = open_catalog(sqlite_catalog).load_table(CDC)
    info = table.schema().find_field("info").field_type
    assert [(f.name, str(f.field_type)) for f in info.fields][2:] == [("score", "long"), ("note", "string")]
    assert [f.name for f in table.schema().fields] == ["region", "id", "info", "seq", "channel"]
    expected = model.expected()
    assert any(r["channel"] is None and r["info"] and r["info"]["note"] is None for r in expected)  # old rows
    assert _table_rows(table.scan().to_arrow().to_pylist()) == expected  # pyiceberg
    evolved = table.metadata_location
    (duck,) = read_with_duckdb(evolved)
    assert _table_rows(duck) == expected

    # iceberg-rust (pyiceberg-core 0.11) matches a nested struct's fields by position, not field id, and fails on
    # files written before a field was added to the struct (apache/iceberg-rust#2617). Compaction rewrites
    # them in the current schema; every reader reads the compacted table.
    from icesink.maintenance.committing import MaintenanceTarget
    from icesink.maintenance.policy import MaintenancePolicy
    from icesink.maintenance.run import MaintenanceRequest, maintain_table

    target = MaintenanceTarget(open_catalog(sqlite_catalog), sqlite_catalog, CDC)
    compacted, report = maintain_table(target, table, MaintenanceRequest(MaintenancePolicy(), everything=True))
    assert report.compaction is not None and report.compaction.groups_committed == 1
    assert _table_rows(icesink.read(compacted).to_pylist()) == expected
    assert _table_rows(iceberg_rust_sql(compacted, "SELECT * FROM t").to_pylist()) == expected
    columns = ["region", "id", "info", "seq", "channel"]
    java_evolved, java_compacted = read_many_with_iceberg_java(
        java_reader, [(evolved, columns), (compacted.metadata_location, columns)]
    )
    assert _table_rows(java_evolved) == expected
    assert _table_rows(java_compacted) == expected


# --- another tool changes nested fields while the stream runs ------------------------------------------------------


KEYED = "shop.keyed"
_KEYED_INPUT = pa.schema(
    [
        ("key", pa.struct([("tenant", pa.string()), ("id", pa.int64())])),
        ("value", pa.string()),
        ("seq", pa.int64()),
        ("op", pa.string()),
    ]
)
KEYED_DDL = "key struct<tenant: string, id: long>, value string, seq long, op string"


def _keyed_changes(rng: Any, checkpoint: int) -> list[dict[str, Any]]:
    return [
        {
            "key": {"tenant": rng.choice(["a/b", "ü %"]), "id": rng.randrange(6)},
            "value": f"v{checkpoint}-{n}",
            "seq": checkpoint * 100 + rng.randrange(10),
            "op": rng.choices(["I", "U", "D"], weights=[4, 4, 2])[0],
        }
        for n in range(20)
    ]


def _keyed_model(model: dict[tuple[str, int], dict[str, Any]], changes: list[dict[str, Any]]) -> None:
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for _, change in sorted(enumerate(changes), key=lambda p: (p[1]["seq"], p[0])):
        latest[(change["key"]["tenant"], change["key"]["id"])] = change
    for key, change in latest.items():
        if change["op"] == "D":
            model.pop(key, None)
        else:
            model[key] = {k: change[k] for k in ("key", "value", "seq")}


def _keyed_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        ({"key": r["key"], "value": r["value"], "seq": r["seq"]} for r in rows),
        key=lambda r: (r["key"]["tenant"], r["key"]["id"]),
    )


@pytest.mark.spark
@pytest.mark.interop
def test_a_change_stream_keyed_on_fields_inside_a_struct_equals_the_model(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    import random

    from icesink.errors import ConfigError

    rng = random.Random(5)
    model: dict[tuple[str, int], dict[str, Any]] = {}

    def run(**overrides: Any) -> None:
        df = spark.readStream.schema(KEYED_DDL).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
        options: dict[str, Any] = {
            "equality_fields": ["key.tenant", "key.id"],
            "op_column": "op",
            "sequence_by": "seq",
            "create_table": True,
        }
        icesink.stream(
            df,
            table=KEYED,
            checkpoint_location=str(tmp_path / "ckpt"),
            trigger={"availableNow": True},
            catalog=sqlite_catalog,
            **{**options, **overrides},
        ).awaitTermination()

    (tmp_path / "in").mkdir()
    with pytest.raises(
        ConfigError, match=r"equality field 'key.nope' is neither a column of the DataFrame nor a field"
    ):
        run(equality_fields=["key.nope"])
    with pytest.raises(ConfigError, match=r"equality field 'key' is struct<tenant:string,id:bigint>; a key is a"):
        run(equality_fields=["key"])
    for checkpoint in range(3):
        changes = _keyed_changes(rng, checkpoint)
        write_checkpoint_file(tmp_path / "in", checkpoint, changes, _KEYED_INPUT)
        _keyed_model(model, changes)
        run()
        rows = icesink.read(KEYED, catalog=sqlite_catalog).to_pylist()
        assert _keyed_rows(rows) == _keyed_rows(list(model.values())), checkpoint

    table = open_catalog(sqlite_catalog).load_table(KEYED)
    schema = table.schema()
    assert schema.identifier_field_names() == {"key.tenant", "key.id"}
    assert schema.find_field("key").required  # Iceberg: the struct holding identifier fields is required
    assert int(table.current_snapshot().summary["total-equality-deletes"]) == 0
    expected = _keyed_rows(list(model.values()))
    assert _keyed_rows(table.scan().to_arrow().to_pylist()) == expected
    assert _keyed_rows(iceberg_rust_sql(table, "SELECT * FROM t").to_pylist()) == expected
    (duck,) = read_with_duckdb(table.metadata_location)
    assert _keyed_rows(duck) == expected
    (java,) = read_many_with_iceberg_java(java_reader, [(table.metadata_location, ["key", "value", "seq"])])
    assert _keyed_rows(java) == expected
    # Net changes across every snapshot: an insert per key the model holds (the table started empty).
    net = icesink.changes(table, table.metadata.snapshots[0].parent_snapshot_id, net_changes=True).to_pylist()
    assert sorted(r["_change_type"] for r in net) == ["insert"] * len(model)
    assert _keyed_rows(net) == expected

    # Iceberg Java 1.9 ignores equality deletes keyed on fields inside structs (apache/iceberg#16280): a
    # table that keeps them would read wrong there, so such a stream refuses to start.
    with open_catalog(sqlite_catalog).load_table(KEYED).transaction() as change:
        change.set_properties({"icesink.equality-deletes.convert-at-commit": "false"})
    with pytest.raises(ConfigError, match=r"equality fields inside structs.*convert-at-commit"):
        run()


_NESTED_KEY_BATCHES = [
    [("a", 1, "one", "I"), ("a", 2, "two", "I"), ("b", 1, "b-one", "I")],
    [("a", 1, "one v2", "U"), ("a", 2, None, "D"), ("c", 9, "new", "I")],
]
_NESTED_KEY_ROWS = [
    {"key": {"tenant": "a", "id": 1}, "value": "one v2"},
    {"key": {"tenant": "b", "id": 1}, "value": "b-one"},
    {"key": {"tenant": "c", "id": 9}, "value": "new"},
]


def _create_keyed_inside_a_struct(config: CatalogConfig) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, StructType

    key = StructType(NestedField(4, "tenant", StringType(), required=True), NestedField(5, "id", LongType(), True))
    schema = Schema(
        NestedField(1, "key", key, required=True), NestedField(2, "value", StringType()), identifier_field_ids=[4, 5]
    )
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("shop")
    return catalog.create_table(KEYED, schema)


def _write_keyed_inside_a_struct(config: CatalogConfig, checkpoint: int, changes: list[tuple[Any, ...]]) -> Any:
    """One checkpoint of changes keyed on ``key.tenant`` and ``key.id``, written as a stream's task does."""
    from icesink.iceberg.describe import writer_spec
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter

    table = open_catalog(config).load_table(KEYED)
    ids = tuple(table.schema().identifier_field_ids)
    # As the stream's projection hands rows to its tasks: under the table's current names.
    id_name = table.schema().find_field(ids[1]).name
    input_schema = pa.schema(
        [
            ("key", pa.struct([("tenant", pa.string()), (id_name, pa.int64())])),
            ("value", pa.string()),
            ("op", pa.string()),
            ("__icesink_order", pa.int64()),
        ]
    )
    spec = writer_spec(table, KEYED, "job", ChangeSpec(ids, op_column="op")).for_checkpoint(checkpoint)
    writer = TaskWriter(spec, 0, 0)
    rows = [
        {"key": {"tenant": t, id_name: i}, "value": v, "op": op, "__icesink_order": n}
        for n, (t, i, v, op) in enumerate(changes)
    ]
    writer.write(pa.Table.from_pylist(rows, schema=input_schema))
    return writer.complete()


def _stage_keyed_inside_a_struct(config: CatalogConfig, checkpoint: int, changes: list[tuple[Any, ...]]) -> None:
    from icesink.committer.staging import stage_checkpoint

    table = open_catalog(config).load_table(KEYED)
    result = _write_keyed_inside_a_struct(config, checkpoint, changes)
    assert stage_checkpoint(Ledger(config), table, KEYED, "job", checkpoint, [result])


def _by_key(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda r: (r["key"]["tenant"], r["key"]["id"]))


def test_equality_deletes_keyed_inside_a_struct_are_applied_by_icesink(sqlite_catalog: CatalogConfig) -> None:
    """Such deletes written by another tool (a row delta of their own): icesink's reader applies them, and
    maintenance turns them into position deletes, which every reader applies."""
    from icesink.iceberg.manifests import to_data_file
    from icesink.iceberg.snapshots import commit_prepared, prepare_snapshot
    from icesink.maintenance.committing import MaintenanceTarget
    from icesink.maintenance.policy import MaintenancePolicy
    from icesink.maintenance.run import MaintenanceRequest, maintain_table

    catalog = open_catalog(sqlite_catalog)
    _create_keyed_inside_a_struct(sqlite_catalog)
    for checkpoint, changes in enumerate(_NESTED_KEY_BATCHES):
        result = _write_keyed_inside_a_struct(sqlite_catalog, checkpoint, changes)
        table = catalog.load_table(KEYED)
        prepared = prepare_snapshot(
            table,
            [to_data_file(r, 2) for r in result.data_files],
            {"written-by": "another tool"},
            delete_files=[to_data_file(r, 2) for r in result.delete_files],
        )
        commit_prepared(table, prepared)
    table = catalog.load_table(KEYED)
    assert int(table.current_snapshot().summary["total-equality-deletes"]) == 6
    assert _by_key(icesink.read(table)) == _NESTED_KEY_ROWS
    converted, report = maintain_table(
        MaintenanceTarget(catalog, sqlite_catalog, KEYED), table, MaintenanceRequest(MaintenancePolicy())
    )
    assert report.conversion is not None
    assert int(converted.current_snapshot().summary["total-equality-deletes"]) == 0
    assert _by_key(converted.scan().to_arrow()) == _NESTED_KEY_ROWS


def test_the_committer_never_leaves_equality_deletes_keyed_inside_a_struct(sqlite_catalog: CatalogConfig) -> None:
    """Iceberg Java would read the rows they delete: unconverted, such a checkpoint stays staged, loses nothing,
    and is committed as position deletes once it can be."""
    from icesink.errors import ConfigError, DeleteConversionError
    from icesink.iceberg.scan import live_files

    catalog = open_catalog(sqlite_catalog)
    _create_keyed_inside_a_struct(sqlite_catalog)
    ledger = Ledger(sqlite_catalog)

    def commit() -> None:
        TableCommitter(catalog, sqlite_catalog, ledger).commit_pending(KEYED)

    def snapshots() -> int:
        return len(catalog.load_table(KEYED).snapshots())

    first, second = _NESTED_KEY_BATCHES
    _stage_keyed_inside_a_struct(sqlite_catalog, 0, first)
    commit()
    # A data file the deletes reach cannot be read: no fallback to equality deletes.
    (data_file,) = live_files(catalog.load_table(KEYED)).data
    stored = Path(str(data_file.file.file_path).removeprefix("file://"))
    moved = stored.with_name("away.parquet")
    stored.rename(moved)
    _stage_keyed_inside_a_struct(sqlite_catalog, 1, second)
    with pytest.raises(DeleteConversionError) as failed:
        commit()
    message = str(failed.value)
    for part in (KEYED, "checkpoint 1", "key.tenant", "key.id", "stays staged", str(stored.name)):
        assert part in message
    assert snapshots() == 1 and [r.checkpoint_id for r in ledger.pending(KEYED)] == [1]
    moved.rename(stored)
    commit()
    table = catalog.load_table(KEYED)
    assert table.current_snapshot().summary["total-equality-deletes"] == "0"
    assert int(table.current_snapshot().summary["total-position-deletes"]) == 2
    assert _by_key(table.scan().to_arrow()) == _NESTED_KEY_ROWS

    # Another tool turns conversion off while the stream runs: the checkpoint waits for the property to go.
    with table.transaction() as change:
        change.set_properties({"icesink.equality-deletes.convert-at-commit": "false"})
    _stage_keyed_inside_a_struct(sqlite_catalog, 2, [("b", 1, None, "D")])
    with pytest.raises(ConfigError) as refused:
        commit()
    for part in (KEYED, "checkpoint 2", "key.tenant", "icesink.equality-deletes.convert-at-commit=false", "staged"):
        assert part in str(refused.value)
    assert snapshots() == 2 and [r.checkpoint_id for r in ledger.pending(KEYED)] == [2]
    # Over the conversion's row limit, such deletes are converted all the same.
    with catalog.load_table(KEYED).transaction() as change:
        change.remove_properties("icesink.equality-deletes.convert-at-commit")
        change.set_properties({"icesink.equality-deletes.convert-max-rows": "1"})
    commit()
    table = catalog.load_table(KEYED)
    assert not ledger.pending(KEYED)
    assert table.current_snapshot().summary["total-equality-deletes"] == "0"
    assert _by_key(table.scan().to_arrow()) == [r for r in _NESTED_KEY_ROWS if r["key"]["tenant"] != "b"]


def test_a_key_field_renamed_inside_its_struct_by_another_tool_still_converts_and_compacts(
    sqlite_catalog: CatalogConfig,
) -> None:
    """Deletes reaching files written before and after ``key.id`` became ``key.ident``: matched by field id,
    never by the struct's shape (before, conversion failed with "struct fields don't match")."""
    from icesink.maintenance.committing import MaintenanceTarget
    from icesink.maintenance.policy import MaintenancePolicy
    from icesink.maintenance.run import MaintenanceRequest, maintain_table

    catalog = open_catalog(sqlite_catalog)
    _create_keyed_inside_a_struct(sqlite_catalog)

    def commit(checkpoint: int, changes: list[tuple[Any, ...]]) -> Any:
        _stage_keyed_inside_a_struct(sqlite_catalog, checkpoint, changes)
        TableCommitter.of(sqlite_catalog).commit_pending(KEYED)
        return catalog.load_table(KEYED)

    commit(0, [("a", 1, "one", "I"), ("a", 2, "two", "I")])
    with catalog.load_table(KEYED).update_schema() as change:
        change.rename_column("key.id", "ident")
    commit(1, [("c", 9, "nine", "I")])
    table = commit(2, [("a", 1, "one v2", "U"), ("c", 9, None, "D"), ("d", 4, "four", "I")])
    expected = [
        {"key": {"tenant": "a", "ident": 1}, "value": "one v2"},
        {"key": {"tenant": "a", "ident": 2}, "value": "two"},
        {"key": {"tenant": "d", "ident": 4}, "value": "four"},
    ]
    by_key = sorted(icesink.read(table).to_pylist(), key=lambda r: (r["key"]["tenant"], r["key"]["ident"]))
    assert by_key == expected
    assert table.current_snapshot().summary["total-equality-deletes"] == "0"  # converted at commit
    assert sorted(iceberg_rust_sql(table, "SELECT * FROM t").to_pylist(), key=lambda r: r["key"]["ident"]) == expected
    compacted, report = maintain_table(
        MaintenanceTarget(catalog, sqlite_catalog, KEYED),
        table,
        MaintenanceRequest(MaintenancePolicy(), everything=True),
    )
    assert report.compaction is not None and report.compaction.files_rewritten >= 2
    assert sorted(compacted.scan().to_arrow().to_pylist(), key=lambda r: r["key"]["ident"]) == expected


def test_a_checkpoint_that_only_deletes_absent_keys_commits_no_snapshot(sqlite_catalog: CatalogConfig) -> None:
    """As an empty micro-batch: no empty snapshot in the history, the checkpoint committed, its files gone."""
    catalog = open_catalog(sqlite_catalog)
    _create_keyed_inside_a_struct(sqlite_catalog)
    ledger = Ledger(sqlite_catalog)
    _stage_keyed_inside_a_struct(sqlite_catalog, 0, [("a", 1, "one", "I")])
    TableCommitter(catalog, sqlite_catalog, ledger).commit_pending(KEYED)
    head = catalog.load_table(KEYED).current_snapshot().snapshot_id
    location = Path(catalog.load_table(KEYED).location().removeprefix("file://"))
    before = set(location.rglob("*.parquet"))
    _stage_keyed_inside_a_struct(sqlite_catalog, 1, [("x", 7, None, "D"), ("y", 8, None, "D")])
    staged = ledger.get(KEYED, "job", 1)
    assert (
        staged is not None
        and staged.manifests.delete_files == 1
        and len(set(location.rglob("*.parquet")) - before) == 1
    )
    (outcome,) = TableCommitter(catalog, sqlite_catalog, ledger).commit_pending(KEYED)
    assert outcome.snapshot_id is None and outcome.checkpoint_ids == (1,)
    table = catalog.load_table(KEYED)
    assert table.current_snapshot().snapshot_id == head and len(table.snapshots()) == 1
    row = ledger.get(KEYED, "job", 1)
    assert row is not None and row.state == "committed" and row.manifests_deleted
    assert set(location.rglob("*.parquet")) == before  # its equality delete file is gone
    assert _by_key(icesink.read(table)) == [{"key": {"tenant": "a", "id": 1}, "value": "one"}]
