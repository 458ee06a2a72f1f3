"""Durations as users write them: ``"15 minutes"``, ``"90s"``, ``"1.5 hours"`` or a ``datetime.timedelta``."""

from __future__ import annotations

import datetime
import re

_MICROS = {
    "us": 1,
    "microsecond": 1,
    "ms": 1_000,
    "millisecond": 1_000,
    "s": 1_000_000,
    "sec": 1_000_000,
    "second": 1_000_000,
    "m": 60_000_000,
    "min": 60_000_000,
    "minute": 60_000_000,
    "h": 3_600_000_000,
    "hour": 3_600_000_000,
    "d": 86_400_000_000,
    "day": 86_400_000_000,
    "w": 604_800_000_000,
    "week": 604_800_000_000,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$")


class DurationError(ValueError):
    """Not a duration; the message says what is taken."""


def duration_micros(value: object) -> int:
    """The duration in microseconds; :class:`DurationError` for anything else (negative durations included)."""
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros < 0:
            raise DurationError(f"a duration cannot be negative ({value!r})")
        return micros
    if isinstance(value, str):
        match = _DURATION.match(value.lower())
        if match is not None:
            number, name = float(match.group(1)), match.group(2)
            unit = _MICROS.get(name) or (_MICROS.get(name[:-1]) if name.endswith("s") else None)
            if unit is not None:
                return round(number * unit)
            if not name and number == 0:  # zero needs no unit
                return 0
    raise DurationError(
        f"{value!r} is not a duration; write a number and a unit, e.g. '15 minutes', '90 seconds', '2 hours', "
        "'1 day', or pass a datetime.timedelta"
    )
