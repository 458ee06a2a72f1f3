"""Collapsing a task's changes to the last change per key (no Spark: the executor function alone)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icesink.errors import BadRowError
from icesink.paths import file_uri
from icesink.results import FileContent
from icesink.writer.spec import ChangeSpec, ColumnSpec, WriterSpec
from icesink.writer.task import TaskWriter

COLUMNS = (
    ColumnSpec(1, "id", "long", True),
    ColumnSpec(2, "value", "string", False),
    ColumnSpec(3, "seq", "long", False),
)


def spec(tmp_path: Path, **changes: object) -> WriterSpec:
    options: dict[str, object] = {"equality_field_ids": (1,), "op_column": "op", "sequence_column": "seq", **changes}
    return WriterSpec(
        "shop.t",
        file_uri(tmp_path / "data"),
        COLUMNS,
        (),
        0,
        "job",
        3,
        changes=ChangeSpec(**options),  # type: ignore[arg-type]
    )


def changes(*rows: tuple[int | None, str, int | None, str]) -> pa.Table:
    ids, values, seqs, ops = zip(*rows, strict=True)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "value": list(values),
            "seq": pa.array(seqs, pa.int64()),
            "op": list(ops),
            "__icesink_order": pa.array(range(len(rows)), pa.int64()),
        }
    )


def written(tmp_path: Path, spec_: WriterSpec, table: pa.Table) -> tuple[list[dict[str, object]], list[int]]:
    writer = TaskWriter(spec_, 0, 0)
    writer.write(table)
    result = writer.complete()
    data = [r for f in result.data_files for r in pq.read_table(f.path.removeprefix("file://")).to_pylist()]
    deleted = [r["id"] for f in result.delete_files for r in pq.read_table(f.path.removeprefix("file://")).to_pylist()]
    assert all(f.content == FileContent.EQUALITY_DELETES and f.equality_ids == (1,) for f in result.delete_files)
    return sorted(data, key=lambda r: r["id"]), sorted(deleted)


def test_highest_sequence_wins_and_ties_go_to_the_later_row(tmp_path: Path) -> None:
    data, deleted = written(
        tmp_path,
        spec(tmp_path),
        changes((1, "late-seq", 9, "U"), (1, "early-seq", 2, "U"), (2, "first", 5, "I"), (2, "tie-later", 5, "U")),
    )
    assert data == [{"id": 1, "value": "late-seq", "seq": 9}, {"id": 2, "value": "tie-later", "seq": 5}]
    assert deleted == [1, 2]  # every written key replaces what the table held


def test_delete_as_last_change_writes_only_the_key(tmp_path: Path) -> None:
    data, deleted = written(tmp_path, spec(tmp_path), changes((1, "a", 1, "I"), (1, "a", 2, "D"), (7, "x", 1, "D")))
    assert data == []
    assert deleted == [1, 7]  # deleting an absent key is harmless


def test_missing_sequence_counts_as_oldest(tmp_path: Path) -> None:
    data, _ = written(tmp_path, spec(tmp_path), changes((1, "with-seq", 1, "U"), (1, "no-seq", None, "U")))
    assert data == [{"id": 1, "value": "with-seq", "seq": 1}]


def test_configured_operation_values(tmp_path: Path) -> None:
    debezium = {"op_kinds": (("c", "insert"), ("u", "update"), ("d", "delete"), ("r", "insert"))}
    data, deleted = written(
        tmp_path, spec(tmp_path, **debezium), changes((1, "a", 1, "c"), (2, "b", 1, "r"), (1, "a", 2, "d"))
    )
    assert data == [{"id": 2, "value": "b", "seq": 1}]
    assert deleted == [1, 2]


def test_unknown_operation_names_value_column_table_and_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(BadRowError, match=r"shop\.t, checkpoint 3.*column 'op' has the unknown operation 'X'.*id=5"):
        written(tmp_path, spec(tmp_path), changes((5, "a", 1, "X")))


def test_null_key_names_the_row(tmp_path: Path) -> None:
    with pytest.raises(BadRowError, match=r"equality field 'id' is null in 1 row.*value='orphan'"):
        written(tmp_path, spec(tmp_path), changes((1, "a", 1, "I"), (None, "orphan", 1, "I")))


def test_equality_deletes_and_data_are_compressed_with_their_own_codecs(tmp_path: Path) -> None:
    from dataclasses import replace

    from icesink.writer.spec import Compression

    spec_ = replace(spec(tmp_path), compression=Compression("zstd", 5), delete_compression=Compression("snappy"))
    writer = TaskWriter(spec_, 0, 0)
    writer.write(changes((1, "a", 1, "U"), (2, "b", 1, "U")))
    result = writer.complete()
    codecs = {}
    for record in (*result.data_files, *result.delete_files):
        footer = pq.ParquetFile(record.path.removeprefix("file://")).metadata
        codecs[record.content] = {footer.row_group(0).column(i).compression for i in range(footer.num_columns)}
    assert codecs == {FileContent.DATA: {"ZSTD"}, FileContent.EQUALITY_DELETES: {"SNAPPY"}}
