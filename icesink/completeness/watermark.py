"""A stream's watermark and the per-split state it is made of; pure values, no Spark and no pyiceberg.

Like a Flink source's per-split watermarks (FLIP-27): each split's mark is the largest event time seen in it
minus the allowed lateness; the stream's watermark is the smallest mark of the splits that had data within the
idle timeout (processing time), so a split that falls silent stops holding the others back, and a split seen
for the first time (or again, after being idle) starts at the current watermark. The watermark never moves
backwards: the fold takes the larger of the old and the new value, and the committer does the same against
what the table holds.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

# A checkpoint's split state, among the values staged with it (never a summary field: the committer records it as
# the table property icesink.watermark-splits.<job id>, one copy rather than one per snapshot).
SPLITS_CHECKPOINT_VALUE = "icesink.watermark.splits"

# How long an idle split's mark is kept (or the idle timeout, if longer).
FORGET_AFTER_MS = 24 * 3600 * 1000

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
# What a summary value can say (datetime's range): event times beyond it are refused where they are observed.
MIN_MICROS = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
MAX_MICROS = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z


def micros_to_datetime(micros: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(microseconds=micros)


def datetime_to_micros(moment: datetime.datetime) -> int:
    """Microseconds since the epoch; a naive datetime is read as UTC."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def format_watermark(micros: int) -> str:
    """ISO 8601 with microseconds and zone, as the summary holds it: ``2026-11-25T10:00:00.000000+00:00``."""
    return micros_to_datetime(micros).isoformat(timespec="microseconds")


def parse_watermark(text: str) -> int:
    """The microseconds a summary's ``icesink.watermark`` says; :class:`ValueError` for anything else."""
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"watermark {text!r} has no zone")
    return datetime_to_micros(moment)


@dataclass(frozen=True)
class SplitMark:
    """One split: its mark (largest event time minus lateness, in microseconds) and when it last had data
    (the driver's clock, milliseconds since the epoch)."""

    mark: int
    seen_ms: int


@dataclass(frozen=True)
class WatermarkState:
    """A stream's watermark (None before its first event time) and its splits, keyed by their JSON values."""

    watermark: int | None = None
    splits: Mapping[str, SplitMark] = field(default_factory=dict)

    def fold(self, observed: Mapping[str, int], now_ms: int, idle_ms: int) -> WatermarkState:
        """The state after a micro-batch in which each split in ``observed`` reached the given mark.

        A split seen now starts no lower than the current watermark (new, or back from idleness); the splits
        seen within ``idle_ms`` of ``now_ms`` decide the watermark, which only grows.
        """
        floor = self.watermark
        splits = dict(self.splits)
        for split, mark in observed.items():
            known = splits.get(split)
            marks = [mark] + ([known.mark] if known is not None else []) + ([floor] if floor is not None else [])
            splits[split] = SplitMark(max(marks), now_ms)
        # A split silent for long is forgotten, so that the state does not grow with every split ever seen; if it
        # comes back it starts at the watermark, as after any idleness.
        forget_ms = max(idle_ms, FORGET_AFTER_MS)
        splits = {k: s for k, s in splits.items() if now_ms - s.seen_ms <= forget_ms}
        active = [s.mark for s in splits.values() if now_ms - s.seen_ms <= idle_ms]
        if not active:
            return WatermarkState(self.watermark, splits)  # every split idle: nothing says how far the input is
        low = min(active)
        return WatermarkState(low if floor is None else max(floor, low), splits)

    def encode_splits(self) -> str:
        """The splits as JSON: ``{"[\\"orders\\", 0]": [mark, seen_ms], ...}``."""
        return json.dumps(
            {split: [s.mark, s.seen_ms] for split, s in sorted(self.splits.items())}, separators=(",", ":")
        )

    @staticmethod
    def decode_splits(text: str) -> dict[str, SplitMark]:
        """Read what :meth:`encode_splits` wrote; :class:`ValueError` for anything else."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError(f"splits {text[:80]!r} are not a JSON object")
        splits = {}
        for split, value in raw.items():
            if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
                raise ValueError(f"split {split!r} holds {value!r}, not [mark, seen_ms]")
            splits[split] = SplitMark(value[0], value[1])
        return splits
