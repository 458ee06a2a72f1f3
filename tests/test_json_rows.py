"""JSON values into Arrow columns of a table's types (icesink/writer/json_rows.py): every value a type holds
exactly is taken as it is, in any JSON spelling; every other is refused naming its row, field and value."""

from __future__ import annotations

import datetime
import decimal
import json
import math
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icesink.writer.json_rows import JsonNames, RefusedValue, rows_to_arrow
from icesink.writer.spec import ColumnSpec

D = decimal.Decimal


def column(kind: str, *children: ColumnSpec, name: str = "c", field_id: int = 1) -> ColumnSpec:
    return ColumnSpec(field_id, name, kind, False, children)


def one(kind: str, *values: Any) -> list[Any]:
    (array,) = rows_to_arrow([column(kind)], [{"c": v} for v in values])
    return array.to_pylist()


def refused(kind: str, value: Any) -> str:
    with pytest.raises(RefusedValue) as raised:
        rows_to_arrow([column(kind)], [{"c": None}, {"c": value}])
    assert raised.value.row == 1 and raised.value.path == "c"
    return str(raised.value)


def test_numbers_are_taken_exactly_in_any_spelling() -> None:
    assert one("long", 1, -(2**63), 2**63 - 1, 2.0, D("7"), None) == [1, -(2**63), 2**63 - 1, 2, 7, None]
    assert one("int", -(2**31), 2**31 - 1) == [-(2**31), 2**31 - 1]
    assert one("decimal(12, 4)", "5.6789", "1.00", 3, D("-0.5"), "1E+3") == [
        D("5.6789"),
        D("1.0000"),
        D("3.0000"),
        D("-0.5000"),
        D("1000.0000"),
    ]
    doubles = one("double", 0.1, 2**53, D("2.000000000001"), "NaN", "-Infinity")
    assert doubles[:3] == [0.1, float(2**53), 2.000000000001] and math.isnan(doubles[3]) and doubles[4] == -math.inf
    # A float's digits as written (1.1) are the float's own; so is the double equal to it.
    single = struct.unpack("f", struct.pack("f", 1.1))[0]
    assert one("float", 1.1, single, 3.4028234663852886e38) == [single, single, 3.4028234663852886e38]


@pytest.mark.parametrize(
    ("kind", "value", "why"),
    [
        ("long", 1.5, "not a whole number"),
        ("long", True, "not a number"),
        ("long", "1", "not a number"),
        ("int", 2**31, "out of int's range"),
        ("long", 2**63, "out of long's range"),
        ("decimal(10, 2)", "1.2345", "more than 2 digit"),
        ("decimal(10, 2)", "123456789.1", "more than 10 digit"),
        ("decimal(10, 2)", "NaN", "cannot hold"),
        ("double", 2**53 + 1, "beyond 2^53"),
        ("float", 1.100000001, "digits a float cannot hold"),
        ("float", 1e300, "beyond a float's range"),
        ("boolean", 1, "not true or false"),
        ("date", "2020-02-30", "not a date"),
        ("timestamp", "2020-01-01T00:00:00Z", "has an offset"),
        ("timestamp", "2020-01-01T00:00:00.0000001", "finer than a microsecond"),
        ("timestamptz", "2020-01-01T00:00:00", "has no offset"),
        ("binary", "not base64!", "not base64"),
        ("fixed[2]", "AAAA", "3 bytes long"),
        ("uuid", "not-a-uuid", "not a UUID"),
    ],
)
def test_a_value_its_type_cannot_hold_is_refused_naming_it(kind: str, value: Any, why: str) -> None:
    assert why in refused(kind, value)


def test_nested_values_and_renamed_fields() -> None:
    struct_column = column(
        "struct",
        ColumnSpec(2, "a", "int", False),
        ColumnSpec(3, "renamed", "decimal(5, 2)", False),
        name="s",
    )
    listed = column("list", ColumnSpec(5, "element", "long", False), name="l", field_id=4)
    mapped = column(
        "map", ColumnSpec(7, "key", "string", True), ColumnSpec(8, "value", "double", False), name="m", field_id=6
    )
    rows = [
        {"s": {"a": 1, "old name": "1.5"}, "l": [1, None, 3], "m": {"k": 1.5}},
        {"s": None, "l": None, "m": None},
        {"s": {"a": None}, "l": [], "m": [{"key": "x", "value": None}]},
    ]
    names = JsonNames(((3, "old name"),))
    arrays = rows_to_arrow([struct_column, listed, mapped], rows, names)
    assert arrays[0].to_pylist() == [{"a": 1, "renamed": D("1.50")}, None, {"a": None, "renamed": None}]
    assert arrays[1].to_pylist() == [[1, None, 3], None, []]
    assert arrays[2].to_pylist() == [[("k", 1.5)], None, [("x", None)]]
    with pytest.raises(RefusedValue, match=r"row 1: field 'l\[\]' holds 2.5, which long cannot hold"):
        rows_to_arrow([listed], [{"l": [1]}, {"l": [1, 2.5]}])
    with pytest.raises(RefusedValue, match=r"row 0: field 'm.key' holds None, and a map's key cannot be null"):
        rows_to_arrow([mapped], [{"m": [{"key": None, "value": 1.0}]}])


@settings(max_examples=300, deadline=None)
@given(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=4, min_value=D("-99999999.9999"), max_value=D("99999999.9999")
    )
)
def test_every_decimal_of_the_column_comes_back_exactly_whatever_its_spelling(value: D) -> None:
    spellings = [str(value), format(value, "f"), value, json.loads(json.dumps(str(value)))]
    for spelling in spellings:
        assert one("decimal(12, 4)", spelling) == [value.quantize(D("0.0001"))]


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_every_float_comes_back_as_itself_from_its_own_value_and_its_shortest_digits(value: float) -> None:
    """A float column takes the double equal to the float, and the digits Java prints for it (``1.1``), which a
    JSON reader gives as the nearest double; a double column widened from it takes the float's exact value."""
    import numpy as np

    digits = float(str(np.float32(value)))  # the fewest digits that read back as this float
    assert one("float", value) == [value]
    assert one("float", digits) == [value]
    assert one("double", value) == [value]


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31, 23, 59, 59)))
def test_every_timestamp_comes_back_to_the_microsecond(value: datetime.datetime) -> None:
    assert one("timestamp", value.isoformat(timespec="microseconds")) == [value]
    zoned = value.replace(tzinfo=datetime.UTC)
    (array,) = rows_to_arrow([column("timestamptz")], [{"c": zoned.isoformat()}])
    assert array.to_pylist() == [zoned]
    assert array.type == pa.timestamp("us", tz="UTC")
