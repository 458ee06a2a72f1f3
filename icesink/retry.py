"""How icesink waits before trying again: one backoff policy for every retry loop.

Exponential from ``first`` up to ``cap``, times a random factor in [0.5, 1): many writers or tables
that failed together spread out instead of retrying in step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    first: float  # seconds after the first failure
    cap: float  # the longest wait

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row (1 or more)."""
        return min(self.cap, self.first * 2.0 ** min(max(failures, 1) - 1, 30)) * random.uniform(0.5, 1.0)

    def longest(self) -> float:
        """The capped wait, for failures that retrying cannot mend until someone acts."""
        return self.cap * random.uniform(0.5, 1.0)
