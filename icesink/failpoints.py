"""Named points where fault-injection tests make a process die for real.

``ICESINK_FAILPOINTS=name[,name…]`` makes the process SIGKILL itself when it
reaches one of the named points, so crash tests hit exact moments of the
commit protocol (after the catalog commit, before the ledger update, …)
with a real, unclean death. With ``ICESINK_FAILPOINT_SCOPE=group`` the whole
process group dies instead, like a machine losing power: a Spark driver
started in its own session takes its JVM and Python workers with it.
Unset, a failpoint costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "ICESINK_FAILPOINTS"
SCOPE_ENV = "ICESINK_FAILPOINT_SCOPE"


def failpoint(name: str) -> None:
    active = os.environ.get(ENV)
    if not active or name not in active.split(","):
        return
    if os.environ.get(SCOPE_ENV) == "group":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
