"""Peak resident memory of this process and its descendants, sampled from /proc (Linux)."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _role(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmdline.split(" ")[0]:
        return "jvm"
    if "pyspark.daemon" in cmdline or "pyspark/daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python_workers"
    return "other"


class PeakMemory:
    """Samples RSS every ``interval`` seconds: the driver's Python, its JVM, and Spark's Python workers."""

    def __init__(self, interval: float = 0.1) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self.peak_kib = {"driver_python": 0, "jvm": 0, "python_workers": 0}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            totals = {"driver_python": _rss_kib(me), "jvm": 0, "python_workers": 0}
            pending = _children(me)
            while pending:
                pid = pending.pop()
                role = _role(pid)
                if role in totals:
                    totals[role] += _rss_kib(pid)
                pending += _children(pid)
            for role, value in totals.items():
                self.peak_kib[role] = max(self.peak_kib[role], value)
            self._stop.wait(self._interval)

    def mib(self) -> dict[str, float]:
        return {role: round(kib / 1024, 1) for role, kib in self.peak_kib.items()}
