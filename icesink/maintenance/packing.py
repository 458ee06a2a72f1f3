"""Consecutive items in groups of a bounded total size: one compaction commit, one merge commit, one batch of
key reads each."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def packed(items: Iterable[T], size: Callable[[T], int], limit: int) -> list[list[T]]:
    """``items`` in order, in groups whose sizes add up to at most ``limit`` (an item larger alone)."""
    groups: list[list[T]] = []
    total = 0
    for item in items:
        if not groups or (total + size(item) > limit and groups[-1]):
            groups.append([])
            total = 0
        groups[-1].append(item)
        total += size(item)
    return groups
