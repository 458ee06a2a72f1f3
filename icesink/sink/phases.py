"""Where a micro-batch's time goes on the driver."""

from __future__ import annotations

import time


class Phases:
    """Where a micro-batch's time goes on the driver, phase by phase (logged at INFO, kept for profiles)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.milliseconds: dict[str, float] = {}

    def done(self, phase: str) -> None:
        now = time.perf_counter()
        self.milliseconds[phase] = self.milliseconds.get(phase, 0.0) + (now - self._last) * 1000
        self._last = now

    def __str__(self) -> str:
        return " ".join(f"{name}={ms:.0f}ms" for name, ms in self.milliseconds.items())
