"""The threads a process reads data files' footers, filters and key columns on."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

READING_THREADS = 4
_pool: tuple[ThreadPoolExecutor | None, int] = (None, 0)
_pool_lock = threading.Lock()


def in_parallel(work: Callable[[T], R], items: Sequence[T], alone_below: int = 2) -> list[R]:
    """``work`` over ``items`` on the process's reading threads, in order; fewer than ``alone_below`` items on
    this thread (handing small reads to threads costs more than it saves, the GIL being theirs to share).

    The threads start once per process: a commit over many small tables would otherwise start a pool for
    every table, and starting the threads cost more than the reads themselves. ``work`` must not wait for
    other work of this pool (it would wait for a thread it holds).
    """
    if len(items) < alone_below:
        return [work(item) for item in items]
    global _pool
    with _pool_lock:
        pool, pid = _pool
        if pool is None or pid != os.getpid():  # a forked child has none of its parent's threads
            pool = ThreadPoolExecutor(max_workers=READING_THREADS, thread_name_prefix="icesink-reads")
            _pool = (pool, os.getpid())
    return list(pool.map(work, items))
