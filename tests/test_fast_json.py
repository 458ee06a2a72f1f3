"""The fast JSON reader and writer give exactly what the standard library gives (values, types and errors), on
JSON built to hit every place orjson differs: integers past 64 bits, numbers whose digits a decimal needs, NaN
and infinities, lone surrogates, duplicate names, text that is not JSON."""

from __future__ import annotations

import decimal
import json
import math
from typing import Any

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
    return bool(a == b)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_reads_what_the_standard_library_reads(value: Any) -> None:
    text = json.dumps(value)
    for data in (text, text.encode("utf-8", "surrogatepass")):
        for exact in (False, True):
            expected = json.loads(text, parse_float=decimal.Decimal) if exact else json.loads(text)
            try:
                got = fast_json.loads(data, exact_numbers=exact)
            except ValueError:
                assert isinstance(data, bytes)  # lone surrogates are not UTF-8: refused, as json refuses them
                with pytest.raises(ValueError):
                    json.loads(data.decode("utf-8"))
                continue
            assert _same(got, expected), (data, got, expected)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_writes_what_reads_back_as_the_standard_library_writes(value: Any) -> None:
    written = fast_json.dumps(value)
    assert _same(json.loads(written), json.loads(json.dumps(value)))


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
    ],
)
def test_an_envelope_reads_as_before(after: str, read_again: bool) -> None:
    schema = _row_schema({"amount": _DECIMAL, "ratio": {"type": "double"}})
    prefix = b'{"schema":{},"payload":'
    body = '{"before":null,"after":' + after + ',"source":{"lsn":1,"ts_ms":2},"op":"c"}'
    data = prefix + body.encode() + b"}"
    got = payload_after(data, len(prefix), "value", ("t", 0, 1), schema.decimals, schema.doubles)
    expected = json.loads(body, parse_float=decimal.Decimal)
    assert isinstance(got["after"]["ratio"], decimal.Decimal) == read_again  # digits kept: read by json again
    for name, value in expected["after"].items():
        if name == "ratio":
            assert float(got["after"][name]) == float(value)  # read alike: the reader makes both the same double
        else:
            assert _same(got["after"][name], value)
    assert _same(got["source"], expected["source"])


def test_an_envelope_that_is_not_json_names_the_record() -> None:
    prefix = b'{"schema":{},"payload":'
    with pytest.raises(DecodeError, match="topic t, partition 0, offset 7: the record's value is not JSON"):
        payload_after(prefix + b'{"op":"c",}}', len(prefix), "value", ("t", 0, 7), True)
