"""JSON read and written by orjson where it gives exactly what the standard library gives, and by the standard
library where it would not.

orjson reads and writes JSON several times faster than :mod:`json` (a Debezium payload: about 1.3 µs against
4.9 µs), which matters where every record of a micro-batch is read in Python. It differs from :mod:`json` in
ways that would change data, each handled here:

* it reads an integer below -2**63 or above 2**64 - 1 as a float (:mod:`json` keeps every digit): a value
  holding a whole float that large is read again by :mod:`json`;
* it refuses ``NaN`` and ``Infinity`` tokens, numbers too large for a double and lone surrogates, which
  :mod:`json` reads: such text is read by :mod:`json`, and text that is not JSON raises :mod:`json`'s error;
* it writes NaN and infinities as ``null``, and refuses integers past 64 bits, decimals and lone surrogates:
  such values are written by :mod:`json`.

Floats read the same: both read a number's digits to the nearest double.
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Callable
from typing import Any

import orjson


def loads(data: bytes | str, exact_numbers: bool = False, alike: Callable[[Any], bool] | None = None) -> Any:
    """``json.loads(data)`` (bytes as UTF-8): the same value, and for text that is not JSON the same error. With
    ``exact_numbers``, numbers with a fraction or an exponent are read as :class:`decimal.Decimal`, every digit
    kept.

    orjson's value is kept unless it holds a float :mod:`json` may read otherwise: any float with
    ``exact_numbers``, else a whole float of 2**63 or more (an integer orjson could not hold). A caller that
    knows where a float serves as well as the digits passes ``alike``, which says of orjson's value whether to
    keep it: then the value holds floats where :mod:`json` would give decimals, which that caller accepts."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _standard(data, exact_numbers)
    if alike is not None:
        return value if alike(value) else _standard(data, exact_numbers)
    if holds_float(value) and (exact_numbers or _holds_large_integer(value)):
        return _standard(data, exact_numbers)
    return value


def dumps(value: Any) -> str:
    """``json.dumps(value)`` as far as any JSON reader can tell: the same values, spelled compactly and with
    non-ASCII characters as themselves."""
    if not holds_non_finite(value):
        try:
            return orjson.dumps(value).decode()
        except TypeError:  # a decimal, an integer past 64 bits, a lone surrogate
            pass
    return json.dumps(value)


def holds_float(value: Any) -> bool:
    """Whether a value read from JSON holds a float anywhere."""
    return _holds(value, _any)


def holds_non_finite(value: Any) -> bool:
    """Whether a value holds NaN or an infinity anywhere (which orjson would write as ``null``)."""
    return _holds(value, _non_finite)


def _holds_large_integer(value: Any) -> bool:
    """Whether a value holds a float that may have been an integer orjson could not hold (past 64 bits)."""
    return _holds(value, _large_whole)


def _holds(value: Any, wanted: Callable[[float], bool]) -> bool:
    """Whether a value holds a float that is ``wanted``, at any depth."""
    kind = type(value)
    if kind is dict:
        values = value.values()
    elif kind is list:
        values = value
    else:
        return kind is float and wanted(value)
    for item in values:  # a loop and type tests, not any(): this runs for every record of a micro-batch
        item_kind = type(item)
        if item_kind is float:
            if wanted(item):
                return True
        elif (item_kind is dict or item_kind is list) and _holds(item, wanted):
            return True
    return False


def _any(_: float) -> bool:
    return True


def _non_finite(number: float) -> bool:
    return not math.isfinite(number)


def _large_whole(number: float) -> bool:
    return abs(number) >= 2.0**63 and number.is_integer()


def _standard(data: bytes | str, exact_numbers: bool) -> Any:
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return json.loads(text, parse_float=decimal.Decimal) if exact_numbers else json.loads(text)
