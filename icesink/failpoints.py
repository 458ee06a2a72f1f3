"""Named points where fault-injection tests make a process die for real.

``ICESINK_FAILPOINTS=name[,name…]`` makes the process SIGKILL itself when it
reaches one of the named points, so crash tests hit exact moments of the
commit protocol (after the catalog commit, before the ledger update, …)
with a real, unclean process death. Unset, a failpoint costs one lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "ICESINK_FAILPOINTS"


def failpoint(name: str) -> None:
    active = os.environ.get(ENV)
    if active and name in active.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
