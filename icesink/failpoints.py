"""Named points where fault-injection tests make a process die for real.

``ICESINK_FAILPOINTS=name[,name…]`` makes the process SIGKILL itself when it
reaches one of the named points (``name@N``: the N-th time it does), so crash tests hit exact moments of the
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


_reached: dict[str, int] = {}  # how often each armed point was reached in this process


def failpoint(name: str) -> None:
    active = os.environ.get(ENV)
    if not active:
        return
    # ``name@N`` dies the N-th time the point is reached (the first micro-batch may lack what a test kills in).
    armed = [entry.partition("@")[2] for entry in active.split(",") if entry.partition("@")[0] == name]
    if not armed:
        return
    bad = [nth for nth in armed if nth and not nth.isdigit()]
    if bad:
        raise ValueError(f"{ENV}={active!r}: {name}@{bad[0]} should be {name}@N, N the time it dies at (1, 2, ...)")
    _reached[name] = _reached.get(name, 0) + 1
    if not any(not nth or _reached[name] >= int(nth) for nth in armed):
        return
    if os.environ.get(SCOPE_ENV) == "group":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
