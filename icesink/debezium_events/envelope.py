"""The JSON of a Kafka record as Kafka Connect's JsonConverter writes it: ``{"schema": ..., "payload": ...}``.

Most of a record's bytes are its schema, the same text in every record of a table until the table changes:
:class:`Prefixes` remembers the bytes records start with, so that only their payload is parsed. Objects are
read with where each member's value starts and ends, so that a value's exact text can be kept.
"""

from __future__ import annotations

import decimal
import json
import re
from typing import Any

from icesink import fast_json

# Numbers with a fraction stay exact: a decimal written as a JSON number (decimal.format=NUMERIC) keeps every digit.
EXACT_NUMBERS = json.JSONDecoder(parse_float=decimal.Decimal)


_WHITESPACE = re.compile(r"[ \t\n\r]*")


class DecodeError(ValueError):
    """A record that is not a Debezium change event icesink can apply; the message says which and why."""


def where_of(topic: str | None, partition: int | None, offset: int | None) -> str:
    parts = [f"topic {topic}" if topic is not None else "a record"]
    if partition is not None:
        parts.append(f"partition {partition}")
    if offset is not None:
        parts.append(f"offset {offset}")
    return ", ".join(parts)


class Prefixes:
    """Schemas seen before, by the bytes a record carrying them starts with (``{"schema":...,"payload":``)."""

    def __init__(self) -> None:
        self._known: dict[bytes, Any] = {}
        self._recent: dict[str | None, bytes] = {}  # by topic: a topic's records mostly share a schema

    def find(self, data: bytes, topic: str | None) -> tuple[int, Any] | None:
        """(where the payload starts, what was remembered) for a record that starts with a known prefix."""
        recent = self._recent.get(topic)
        if recent is not None and data.startswith(recent):
            return len(recent), self._known[recent]
        for prefix, remembered in self._known.items():
            if data.startswith(prefix):
                self._recent[topic] = prefix
                return len(prefix), remembered
        return None

    def add(self, prefix: bytes, remembered: Any, topic: str | None) -> None:
        self._known[prefix] = remembered
        self._recent[topic] = prefix


def payload_after(
    data: bytes, start: int, what: str, at: tuple[Any, ...], decimals: bool, doubles: frozenset[str] = frozenset()
) -> Any:
    """The payload of a record whose bytes before ``start`` are a known ``{"schema":...,"payload":``.

    With ``decimals``, numbers with a fraction are read as :class:`decimal.Decimal`, every digit kept, except
    the values of ``doubles`` (a value envelope's rows' fields of type double), which may be read as floats:
    their reader turns either into the same double."""
    rest = data[start:].rstrip()
    if not rest.endswith(b"}"):
        raise DecodeError(f"{where_of(*at)}: the record's {what} is not JSON (it ends before its last '}}')")
    alike = (lambda payload: _floats_alike(payload, doubles)) if decimals and what == "value" else None
    try:
        return fast_json.loads(rest[:-1], exact_numbers=decimals, alike=alike)
    except ValueError as e:  # UnicodeDecodeError included
        raise DecodeError(f"{where_of(*at)}: the record's {what} is not JSON ({e})") from e


def _floats_alike(payload: Any, doubles: frozenset[str]) -> bool:
    """Whether an envelope read with floats may be kept where digits were asked for: floats only as the values
    of its rows' double fields (anywhere else a float may be a decimal's digits, or an integer past 64 bits),
    and none of them 0.0, which may be a number too small for a decimal, refused when read as digits."""
    if type(payload) is not dict:
        return not fast_json.holds_float(payload)
    for member, part in payload.items():  # loops and type tests, not calls: this runs for every record
        kind = type(part)
        if kind is dict:
            row = member == "after" or member == "before"  # elsewhere (the source block) no float may stay
            for name, value in part.items():
                kind = type(value)
                if kind is float:
                    if not row or name not in doubles or not value:
                        return False
                elif (kind is dict or kind is list) and fast_json.holds_float(value):
                    return False
        elif kind is float or (kind is list and fast_json.holds_float(part)):
            return False
    return True


def text_of(data: bytes, what: str, at: tuple[Any, ...]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"{where_of(*at)}: the record's {what} is not JSON ({e})") from e


def parse_object(text: str, at: tuple[Any, ...], what: str) -> tuple[Any, dict[str, tuple[int, int]]]:
    """The JSON value of ``text``; for an object, also where each of its members' values starts and ends."""
    try:
        start = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
        if not text.startswith("{", start):
            return json.loads(text), {}
        spans: dict[str, tuple[int, int]] = {}
        result: dict[str, Any] = {}
        index = _WHITESPACE.match(text, start + 1).end()  # type: ignore[union-attr]
        if text.startswith("}", index):
            return _only(text, index + 1, result), spans
        while True:
            if not text.startswith('"', index):
                raise ValueError(f"expected a member name at character {index}")
            name, index = json.decoder.scanstring(text, index + 1)  # type: ignore[attr-defined]
            index = _WHITESPACE.match(text, index).end()  # type: ignore[union-attr]
            if not text.startswith(":", index):
                raise ValueError(f"expected ':' at character {index}")
            index = _WHITESPACE.match(text, index + 1).end()  # type: ignore[union-attr]
            member, end = EXACT_NUMBERS.raw_decode(text, index)
            spans[name] = (index, end)
            result[name] = member
            index = _WHITESPACE.match(text, end).end()  # type: ignore[union-attr]
            if text.startswith(",", index):
                index = _WHITESPACE.match(text, index + 1).end()  # type: ignore[union-attr]
                continue
            if text.startswith("}", index):
                return _only(text, index + 1, result), spans
            raise ValueError(f"expected ',' or '}}' at character {index}")
    except ValueError as e:
        raise DecodeError(f"{where_of(*at)}: the record's {what} is not JSON ({e})") from e


def _only(text: str, end: int, result: Any) -> Any:
    if text[end:].strip():
        raise ValueError(f"extra data at character {end}")
    return result


def member_text(text: str | None, name: str) -> str | None:
    """The exact JSON text of a member of the (schemaless) value, every digit as written."""
    if text is None:
        return None
    _, spans = parse_object(text, (None, None, None), "value")
    span = spans.get(name)
    return text[span[0] : span[1]] if span else None


def field_schema(schema: dict[str, Any], name: str) -> dict[str, Any] | None:
    for field in schema.get("fields", []):
        if isinstance(field, dict) and field.get("field") == name:
            return dict(field)
    return None
