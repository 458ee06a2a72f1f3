"""Peak resident memory of this process and its descendants, sampled from /proc (Linux).

The sampler runs in a process of its own: walking /proc (a JVM has a hundred threads, each with a list of
children) takes the GIL for milliseconds at a time, and in the driver's process it would slow the driver's own
threads, the committer's most (it gives up the GIL at every file it writes, and waits to get it back).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").glob("*"))
    except OSError:  # the process ended while it was being walked (a Python worker between tasks)
        return found
    for task in tasks:
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
        self.peak_kib = {"driver_python": 0, "jvm": 0, "python_workers": 0}
        self._sampler: subprocess.Popen[str] | None = None

    def __enter__(self) -> PeakMemory:
        command = [sys.executable, str(Path(__file__).resolve()), str(os.getpid()), str(self._interval)]
        self._sampler = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._sampler is not None
        out, _ = self._sampler.communicate("stop\n")  # closing its input ends its sampling
        self.peak_kib = json.loads(out)

    def mib(self) -> dict[str, float]:
        return {role: round(kib / 1024, 1) for role, kib in self.peak_kib.items()}


def _sample(root: int, interval: float) -> None:
    """Sample ``root``'s tree until stdin says stop (or closes); print the peaks as JSON."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    peak = {"driver_python": 0, "jvm": 0, "python_workers": 0}
    me = os.getpid()
    while not stop.is_set():
        totals = {"driver_python": _rss_kib(root), "jvm": 0, "python_workers": 0}
        pending = _children(root)
        while pending:
            pid = pending.pop()
            if pid == me:
                continue
            role = _role(pid)
            if role in totals:
                totals[role] += _rss_kib(pid)
            pending += _children(pid)
        for role, value in totals.items():
            peak[role] = max(peak[role], value)
        stop.wait(interval)
    print(json.dumps(peak), flush=True)


if __name__ == "__main__":
    _sample(int(sys.argv[1]), float(sys.argv[2]))
