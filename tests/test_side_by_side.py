"""Work on several tables side by side (:mod:`icesink.side_by_side`): yielded in order, stopped early without
finishing what was queued, and every result that was made handed back to be abandoned."""

from __future__ import annotations

import threading
import time

import pytest

from icesink.side_by_side import COMMIT_THREADS, SideBySide, on_object_store


class _Located:
    """A table as on_object_store sees it: its location."""

    def __init__(self, location: str) -> None:
        self._location = location

    def location(self) -> str:
        return self._location


@pytest.mark.parametrize(
    ("location", "remote"),
    [
        ("s3://bucket/wh/db/t", True),
        ("s3a://bucket/wh/db/t", True),
        ("gs://bucket/wh/db/t", True),
        ("abfss://container@account.dfs.core.windows.net/wh/t", True),
        ("hdfs:/warehouse/db/t", True),  # Hadoop's spelling of hdfs:///warehouse
        ("/data/wh/db/t", False),
        ("file:///data/wh/db/t", False),
        ("file:/data/wh/db/t", False),  # Hadoop's spelling
        ("C:\\data\\wh\\t", False),  # a Windows path: its drive letter is no scheme
        ("c:/data/wh/t", False),
    ],
)
def test_only_tables_behind_network_requests_count_as_on_an_object_store(location: str, remote: bool) -> None:
    assert on_object_store(_Located(location)) is remote  # type: ignore[arg-type]


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
    release = threading.Event()

    def prepare(n: int) -> int:
        with lock:
            started.append(n)
        if n != 0:  # every thread but the first item's stays busy until unused() has cancelled the queue
            release.wait(30)
        return n

    items = list(range(4 * COMMIT_THREADS))
    each = SideBySide(prepare, items, True)
    assert next(iter(each)) == 0
    # Item 0's thread took the next item and waits too: no thread is free, so the rest are still queued.
    timer = threading.Timer(1.0, release.set)  # unused() cancels at once, then waits for the busy ones
    timer.start()
    unused = each.unused()
    timer.join()
    assert sorted(started) == list(range(COMMIT_THREADS + 1))  # the queued ones never ran
    assert sorted(unused) == list(range(1, COMMIT_THREADS + 1))


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
