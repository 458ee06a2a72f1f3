"""The WriteResult hand-off encoding: round trips, and bytes written by released versions still decode."""

from __future__ import annotations

import decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icesink.errors import WriteResultError
from icesink.results import FileContent, FileRecord, WriteResult, decode_write_result, encode_write_result

# Bytes of format version 1, saved when it was introduced; they must decode forever.
V1_BYTES = (
    b'\x01{"checkpoint_id":7,"task_id":3,"attempt":1,"data_files":[{"path":"file:///w/t/data/a.parquet",'
    b'"content":0,"record_count":10,"file_size_bytes":2048,"spec_id":0,"partition":[19000,"eu",{"b":"AAE="},'
    b'{"d":"1.50"},null],"column_sizes":{"1":100},"value_counts":{"1":10},"null_value_counts":{"1":0},'
    b'"nan_value_counts":{},"lower_bounds":{"1":"AQAAAAAAAAA="},"upper_bounds":{"1":"CgAAAAAAAAA="},'
    b'"split_offsets":[4],"equality_ids":null}],"delete_files":[]}'
)


def test_saved_v1_bytes_still_decode() -> None:
    result = decode_write_result(V1_BYTES)
    assert result.checkpoint_id == 7 and result.task_id == 3 and result.attempt == 1
    (f,) = result.data_files
    assert f.path == "file:///w/t/data/a.parquet"
    assert f.content is FileContent.DATA
    assert f.partition == (19000, "eu", b"\x00\x01", decimal.Decimal("1.50"), None)
    assert f.lower_bounds == {1: (1).to_bytes(8, "little")}
    assert f.upper_bounds == {1: (10).to_bytes(8, "little")}
    assert f.split_offsets == (4,)
    assert encode_write_result(result) == V1_BYTES


def test_newer_version_is_refused_with_a_clear_message() -> None:
    with pytest.raises(WriteResultError, match="newer than this icesink understands; run the same icesink version"):
        decode_write_result(b"\x09{}")
    with pytest.raises(WriteResultError, match="empty write result"):
        decode_write_result(b"")


partition_values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(),
    st.binary(),
    st.booleans(),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
)
id_maps = st.dictionaries(st.integers(1, 10_000), st.integers(0, 2**40))
bound_maps = st.dictionaries(st.integers(1, 10_000), st.binary(max_size=16))
records = st.builds(
    FileRecord,
    path=st.text(min_size=1),
    content=st.sampled_from(list(FileContent)),
    record_count=st.integers(0, 2**40),
    file_size_bytes=st.integers(0, 2**40),
    spec_id=st.integers(0, 100),
    partition=st.lists(partition_values, max_size=4).map(tuple),
    column_sizes=id_maps,
    value_counts=id_maps,
    null_value_counts=id_maps,
    nan_value_counts=id_maps,
    lower_bounds=bound_maps,
    upper_bounds=bound_maps,
    split_offsets=st.lists(st.integers(0, 2**40), max_size=4).map(tuple),
    equality_ids=st.one_of(st.none(), st.lists(st.integers(1, 1000), min_size=1, max_size=3).map(tuple)),
)


@given(
    st.builds(
        WriteResult,
        checkpoint_id=st.integers(0, 2**62),
        task_id=st.integers(0, 10_000),
        attempt=st.integers(0, 10),
        data_files=st.lists(records, max_size=3).map(tuple),
        delete_files=st.lists(records, max_size=3).map(tuple),
    )
)
@settings(deadline=None)  # a busy machine (the suite runs in two processes) makes an example slow, not wrong
def test_round_trip(result: WriteResult) -> None:
    assert decode_write_result(encode_write_result(result)) == result


def test_a_referenced_data_file_survives_the_hand_off() -> None:
    record = FileRecord(
        path="s3://b/t/data/deletes.parquet",
        content=FileContent.POSITION_DELETES,
        record_count=2,
        file_size_bytes=100,
        spec_id=0,
        partition=(),
        referenced_data_file="s3://b/t/data/a b.parquet",
    )
    result = WriteResult(checkpoint_id=1, task_id=0, attempt=0, delete_files=(record,))
    assert decode_write_result(encode_write_result(result)) == result
