"""The fast JSON reader and writer give exactly what the standard library gives (values, types and errors), on
JSON built to hit every place orjson differs: integers past 64 bits, numbers whose digits a decimal needs, NaN
and infinities, lone surrogates, duplicate names, text that is not JSON."""

from __future__ import annotations

import decimal
import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icesink import fast_json
from icesink.debezium_events.connect_values import RowSchema
from icesink.debezium_events.envelope import DecodeError, payload_after

_EDGE_INTEGERS = st.sampled_from(
    [0, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, -(2**64), 10**30, -(10**40)]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    _EDGE_INTEGERS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.sampled_from(["\ud800", "a\udfffb", "é", "\u2028", "\x00"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal with types: 1 is not 1.0 nor True, NaN equals NaN, -0.0 is not 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)  # every digit: 12.10 is not 12.1, -0 is not 0
    return bool(a == b)


# Numbers as JSON writers spell them, not only as json.dumps does: trailing zeros, exponents, signs.
_NUMBER_TEXT = st.one_of(
    st.integers().map(str),
    _EDGE_INTEGERS.map(str),
    st.sampled_from(["12.10", "-0.0", "-0", "1E+2", "1e-7", "0.1", "1e400", "-1e400", "2.5e-400", "1234.56789"]),
    st.decimals(allow_nan=False, allow_infinity=False).map(str).filter(lambda t: "E" not in t or "." in t),
)


def _json_text(value: Any, numbers: list[str]) -> str:
    """``value`` as JSON, non-ASCII written as itself, with ``numbers`` spliced in as array members."""
    text = json.dumps(value, ensure_ascii=False)
    return f"[{text}, {', '.join(numbers)}]" if numbers else text


@settings(max_examples=400, deadline=None)
@given(_VALUES, st.lists(_NUMBER_TEXT, max_size=4))
def test_reads_what_the_standard_library_reads(value: Any, numbers: list[str]) -> None:
    text = _json_text(value, numbers)
    for exact in (False, True):
        expected = json.loads(text, parse_float=decimal.Decimal) if exact else json.loads(text)
        assert _same(fast_json.loads(text, exact_numbers=exact), expected), (text, exact)
        data = text.encode("utf-8", "surrogatepass")  # a raw lone surrogate is not UTF-8
        try:
            from_bytes = json.loads(data.decode("utf-8"), parse_float=decimal.Decimal if exact else float)
        except UnicodeDecodeError:
            with pytest.raises(UnicodeDecodeError):
                fast_json.loads(data, exact_numbers=exact)
        else:
            assert _same(fast_json.loads(data, exact_numbers=exact), from_bytes), (data, exact)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_writes_what_reads_back_as_the_standard_library_writes(value: Any) -> None:
    written = fast_json.dumps(value)
    expected = json.loads(json.dumps(value))
    assert _same(json.loads(written), expected)
    assert _same(fast_json.loads(written), expected)  # as the write side reads the rows back


@pytest.mark.parametrize(
    "text",
    ['{"a":1,"a":2}', "[18446744073709551616]", "[-9223372036854775809]", '["\\ud800"]', "[NaN, -Infinity]", "1e400"],
)
def test_edge_cases_read_alike(text: str) -> None:
    assert _same(fast_json.loads(text), json.loads(text))
    assert _same(fast_json.loads(text, exact_numbers=True), json.loads(text, parse_float=decimal.Decimal))


@pytest.mark.parametrize("text", ["", "[1,", "{}x", "tru", "\ufeff{}", '{"a" 1}', "[1,]"])
def test_text_that_is_not_json_raises_the_standard_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        fast_json.loads(text)
    assert str(got.value) == str(expected.value)


def test_nan_and_large_integers_are_written_as_the_standard_library_writes_them() -> None:
    for value in ([math.nan], {"x": math.inf}, [2**64], ["\ud800"]):
        assert fast_json.dumps(value) == json.dumps(value)
    with pytest.raises(TypeError, match="Decimal is not JSON serializable"):
        fast_json.dumps([decimal.Decimal("1.10")])


def _row_schema(fields: dict[str, dict[str, Any]]) -> RowSchema:
    row = {"type": "struct", "fields": [{"field": n, **f} for n, f in fields.items()], "optional": True}
    return RowSchema.of(row, json.dumps(row, sort_keys=True))


_DECIMAL = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}


@pytest.mark.parametrize(
    ("after", "read_again"),
    [
        ('{"amount":12.10,"ratio":0.1}', True),  # a decimal as a JSON number: its digits
        ('{"amount":"BLA=","ratio":0.1}', False),  # as base64: doubles read as floats alike
        ('{"amount":"BLA=","ratio":18446744073709551616}', False),
        ('{"amount":"BLA=","ratio":0.1,"extra":0.5}', True),  # a float outside the doubles
        ('{"amount":"BLA=","ratio":0.0}', True),  # 0.0 may be a number no decimal holds
        ('{"amount":"BLA=","ratio":[0.5]}', True),
    ],
)
def test_an_envelope_reads_as_the_standard_library_read_it(after: str, read_again: bool) -> None:
    schema = _row_schema({"amount": _DECIMAL, "ratio": {"type": "double"}})
    prefix = b'{"schema":{},"payload":'
    body = '{"before":null,"after":' + after + ',"source":{"lsn":1,"ts_ms":2},"op":"c"}'
    data = prefix + body.encode() + b"}"
    got = payload_after(data, len(prefix), "value", ("t", 0, 1), schema.decimals, schema.doubles)
    before = json.loads(body, parse_float=decimal.Decimal)  # how records were read before orjson
    if read_again:
        assert _same(got["after"], before["after"])  # read by json, every digit as before
    else:
        assert type(got["after"]["ratio"]) is float  # kept as orjson read it
    assert _same(got["source"], before["source"])
    # What the decoder keeps of the row: every value read into its canonical spelling, the same as before.
    try:
        expected = schema.read(before["after"])
    except ValueError as e:
        with pytest.raises(type(e)):
            schema.read(got["after"])
    else:
        assert _same(schema.read(got["after"]), expected)


def test_a_double_no_decimal_holds_is_refused_as_before() -> None:
    schema = _row_schema({"amount": _DECIMAL, "ratio": {"type": "double"}})
    prefix = b'{"schema":{},"payload":'
    data = prefix + b'{"after":{"amount":"BLA=","ratio":1e-9999999999999999999},"op":"c"}}'
    with pytest.raises(decimal.InvalidOperation):
        json.loads(data[len(prefix) : -1], parse_float=decimal.Decimal)
    with pytest.raises(decimal.InvalidOperation):
        payload_after(data, len(prefix), "value", ("t", 0, 1), schema.decimals, schema.doubles)


def test_an_envelope_that_is_not_json_names_the_record() -> None:
    prefix = b'{"schema":{},"payload":'
    with pytest.raises(DecodeError, match="topic t, partition 0, offset 7: the record's value is not JSON"):
        payload_after(prefix + b'{"op":"c",}}', len(prefix), "value", ("t", 0, 7), True)


def _task_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from icesink.debezium_events.decode_task import parse_task

    batch = pa.record_batch(
        {
            "key": pa.array([r["key"].encode() for r in records], pa.binary()),
            "value": pa.array([r["value"].encode() for r in records], pa.binary()),
            "topic": [r["topic"] for r in records],
            "partition": pa.array([r["partition"] for r in records], pa.int32()),
            "offset": pa.array([r["offset"] for r in records], pa.int64()),
        }
    )
    (out,) = parse_task(["key", "value", "topic", "partition", "offset"], keep_rejected=True)(iter([batch]))
    return out.to_pylist()  # type: ignore[no-any-return]


def test_records_nested_about_as_deep_as_python_recurses_never_fail_the_micro_batch() -> None:
    """Around Python's recursion limit a record reads or is set aside; the records after it are decoded."""
    from icesink.debezium_events.decode_task import REJECTED
    from tests.helpers.debezium_fixture import record

    fields = [{"type": "int64", "optional": False, "field": "id"}]
    for depth in range(900, 1101, 8):
        records = [
            record("db.public.t", 0, 0, {"id": 2}, {"id": 2}, fields),
            record("db.public.t", 0, 1, {"id": 1}, {"id": 1, "x": "DEEP"}, fields),
            record("db.public.t", 0, 2, {"id": 3}, {"id": 3}, fields),
        ]
        records[1]["value"] = records[1]["value"].replace('"DEEP"', "[" * depth + "1" + "]" * depth)
        rows = _task_rows(records)
        assert [r["offset"] for r in rows] == [0, 1, 2], depth
        assert [json.loads(rows[i]["row"]) for i in (0, 2)] == [{"id": 2}, {"id": 3}]
        assert rows[1]["source"] == REJECTED or json.loads(rows[1]["row"])["id"] == 1


def test_a_row_that_cannot_be_written_is_a_rejected_record_and_its_schema_is_sent_with_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writing a decoded row can fail where reading it did not (orjson reads deeper than Python recurses): the
    record is set aside, and the schema it would have carried goes with the next row of that schema."""
    from icesink.debezium_events import decode_task
    from tests.helpers.debezium_fixture import record

    def dumps(value: Any) -> str:
        if value.get("x") is not None:
            raise RecursionError("maximum recursion depth exceeded while encoding a JSON object")
        return fast_json.dumps(value)

    monkeypatch.setattr(decode_task, "fast_json", type("F", (), {"dumps": staticmethod(dumps)}))
    fields = [{"type": "int64", "optional": False, "field": "id"}, {"type": "int64", "optional": True, "field": "x"}]
    rows = _task_rows(
        [
            record("db.public.t", 0, 0, {"id": 1}, {"id": 1, "x": 5}, fields),
            record("db.public.t", 0, 1, {"id": 2}, {"id": 2, "x": None}, fields),
        ]
    )
    assert rows[0]["source"] == decode_task.REJECTED and "RecursionError" in rows[0]["row"]
    assert rows[1]["source"] != decode_task.REJECTED and rows[1]["row_schema"]  # the schema, sent once
