"""Tables of a commit across tables worked on side by side, where their files are on an object store.

Before one transaction swaps a group's tables, each table's snapshot is prepared on its own (its equality deletes
converted, its manifests and manifest list written), then each table's metadata file is written. On a local disk
that is Python holding the GIL, and threads only add switching (measured slower, 200 tables). On an object store
every one of those files is requests waiting on the network, dozens a table, so tables worked on side by side
wait together.

In order, and lazily where the tables are not side by side: a caller that stops early (a table that must be read
again, or cannot commit) has prepared no table after it. Side by side, the tables after it were prepared too;
:meth:`SideBySide.unused` hands them back to be abandoned.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Generic, TypeVar
from urllib.parse import urlsplit

from sqlalchemy.pool import SingletonThreadPool

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from sqlalchemy import Engine

T = TypeVar("T")
R = TypeVar("R")

# Requests in flight at once: enough to hide an object store's latency, few enough for its request rate.
COMMIT_THREADS = 8
_pool: tuple[ThreadPoolExecutor | None, int] = (None, 0)
_pool_lock = threading.Lock()


def on_object_store(table: Table) -> bool:
    """Whether the table's files are behind network requests (an ``s3://``, ``gs://``, ``hdfs:/``, ... location; a
    plain path, ``C:\\`` included, and ``file:`` in either spelling are local)."""
    scheme = urlsplit(table.location()).scheme.lower()
    return scheme not in ("", "file") and len(scheme) > 1  # one letter: a Windows drive


def side_by_side(tables: Iterable[Table], catalog: Engine) -> bool:
    """Whether to work on ``tables`` side by side: all on an object store, and a catalog database every thread
    sees (an in-memory SQLite database is one per thread)."""
    return all(on_object_store(t) for t in tables) and not isinstance(catalog.pool, SingletonThreadPool)


def _threads() -> ThreadPoolExecutor:
    """The process's preparing threads, started once (a forked child starts its own)."""
    global _pool
    with _pool_lock:
        pool, pid = _pool
        if pool is None or pid != os.getpid():
            pool = ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="icesink-prepare")
            _pool = (pool, os.getpid())
    return pool


class SideBySide(Generic[T, R]):
    """``prepare`` over ``items``, yielded in order: on the preparing threads when ``side_by_side`` and there
    are several, else one after another as the caller asks. ``prepare`` must not wait for work of these threads."""

    def __init__(self, prepare: Callable[[T], R], items: Sequence[T], side_by_side: bool) -> None:
        self._prepare = prepare
        self._items = list(items)
        self._futures: list[Future[R]] | None = None
        if side_by_side and len(self._items) > 1:
            pool = _threads()
            self._futures = [pool.submit(prepare, item) for item in self._items]
        self._taken = 0

    def __iter__(self) -> Iterator[R]:
        for index, item in enumerate(self._items):
            # Counted as taken once in the caller's hands: one interrupted while waiting is still unused.
            result = self._futures[index].result() if self._futures is not None else self._prepare(item)
            self._taken = index + 1
            yield result

    def unused(self) -> list[R]:
        """What was prepared past the last item taken (side by side only): those not started yet are cancelled,
        the others waited for; without the items that raised."""
        if self._futures is None:
            return []
        left = self._futures[self._taken :]
        for future in left:
            future.cancel()
        wait(left)
        return [f.result() for f in left if not f.cancelled() and f.exception() is None]
