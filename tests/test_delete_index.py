"""icesink's position delete index gives pyiceberg's ``DeleteFileIndex`` answers, for any mix of delete files."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus
from pyiceberg.table.delete_file_index import PATH_FIELD_ID, DeleteFileIndex
from pyiceberg.typedef import Record

from icesink.iceberg.delete_index import PositionDeleteIndex
from icesink.iceberg.scan import LiveFile

PATHS = [f"s3://bucket/t/data/{name}.parquet" for name in ("a", "b", "c", "d", "e", "f", "hé", "z")]


def _data_file(path: str, partition: int | None, spec: int) -> DataFile:
    file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(partition) if partition is not None else Record(),
        record_count=10,
        file_size_in_bytes=100,
    )
    file.spec_id = spec
    return file


@st.composite
def delete_files(draw: st.DrawFn, number: int) -> LiveFile:
    """A position delete file: bounds of one path (names it exactly), of a range, or none; maybe all null,
    maybe of no rows or of unknown rows."""
    shape = draw(st.sampled_from(["exact", "range", "none", "lower-only"]))
    low, high = sorted(
        draw(st.lists(st.sampled_from([*PATHS, "s3://bucket/t/data/0", "s3://x"]), min_size=2, max_size=2))
    )
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    if shape == "exact":
        lower[PATH_FIELD_ID] = upper[PATH_FIELD_ID] = low.encode()
    elif shape == "range":
        lower[PATH_FIELD_ID], upper[PATH_FIELD_ID] = low.encode(), high.encode()
    elif shape == "lower-only":
        lower[PATH_FIELD_ID] = low.encode()
    rows = draw(st.sampled_from([5, 5, 0, -1]))
    values = {PATH_FIELD_ID: 5}
    nulls = {PATH_FIELD_ID: draw(st.sampled_from([0, 2, 5]))}
    file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=f"s3://bucket/t/data/delete-{number}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(draw(st.sampled_from([1, 2]))) if draw(st.booleans()) else Record(),
        record_count=rows,
        file_size_in_bytes=100,
        value_counts=values,
        null_value_counts=nulls,
        lower_bounds=lower or None,
        upper_bounds=upper or None,
    )
    file.spec_id = draw(st.sampled_from([0, 1]))
    return LiveFile(file, draw(st.integers(0, 5)))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_same_delete_files_apply_to_every_data_file_as_pyiceberg_says(data: st.DataObject) -> None:
    deletes = [data.draw(delete_files(n)) for n in range(data.draw(st.integers(0, 8)))]
    theirs = DeleteFileIndex()
    for delete in deletes:
        entry = ManifestEntry.from_args(
            status=ManifestEntryStatus.EXISTING,
            snapshot_id=0,
            sequence_number=delete.sequence_number,
            file_sequence_number=delete.sequence_number,
            data_file=delete.file,
        )
        theirs.add_delete_file(entry, partition_key=delete.file.partition)
    ours = PositionDeleteIndex(deletes)
    for path in PATHS:
        for partition in (None, 1, 2):
            for spec in (0, 1):
                data_file = _data_file(path, partition, spec)
                for sequence_number in range(0, 7):
                    expected = theirs.for_data_file(sequence_number, data_file, partition_key=data_file.partition)
                    found = ours.for_data_file(sequence_number, data_file)
                    assert {f.file_path for f in found} == {f.file_path for f in expected}, (path, partition, spec)
