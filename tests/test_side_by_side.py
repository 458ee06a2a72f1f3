"""Work on several tables side by side (:mod:`icesink.side_by_side`): yielded in order, stopped early without
finishing what was queued, and every result that was made handed back to be abandoned."""

from __future__ import annotations

import threading
import time

import pytest

from icesink.side_by_side import COMMIT_THREADS, SideBySide


def test_results_come_in_order_and_an_error_at_its_place() -> None:
    names: set[str] = set()

    def prepare(n: int) -> int:
        names.add(threading.current_thread().name.split("_")[0])
        time.sleep(0.01 * (5 - n))  # the later ones finish first
        if n == 3:
            raise ValueError("table 3")
        return n

    each = SideBySide(prepare, range(5), True)
    taken = []
    with pytest.raises(ValueError, match="table 3"):
        for result in each:
            taken.append(result)
    assert taken == [0, 1, 2]
    assert each.unused() == [4]  # 3 raised: nothing of it to abandon
    assert names == {"icesink-prepare"}


def test_stopping_early_cancels_what_has_not_started_and_hands_back_what_has() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def prepare(n: int) -> int:
        with lock:
            started.append(n)
        time.sleep(0.05)
        return n

    items = list(range(4 * COMMIT_THREADS))
    each = SideBySide(prepare, items, True)
    assert next(iter(each)) == 0
    unused = each.unused()
    assert len(started) < len(items)  # the queued ones never ran
    assert sorted(unused) == sorted(n for n in started if n != 0)


def test_one_after_another_prepares_nothing_past_where_the_caller_stopped() -> None:
    started: list[int] = []

    def prepare(n: int) -> int:
        started.append(n)
        return n

    each = SideBySide(prepare, range(5), False)
    for result in each:
        if result == 1:
            break
    assert started == [0, 1]
    assert each.unused() == []
