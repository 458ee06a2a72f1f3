"""The icesink commands that messages tell users to run, written so that a shell and the CLI take them as meant.

Every value is quoted for a shell, and the options come before the names: a table or job named ``-x`` after
``--`` is a name, where it would otherwise be taken for an option.
"""

from __future__ import annotations

from collections.abc import Sequence
from shlex import quote


def icesink_command(words: str, *names: object, options: Sequence[str] = ()) -> str:
    """``icesink <words> <options> [--] <names>``: ``words`` is the command (``checkpoints list``), ``options``
    its options and their values in order (``("--job", job, "--yes")``), ``names`` its arguments."""
    arguments = [quote(str(name)) for name in names]
    parts = ["icesink", words, *(quote(o) for o in options)]
    if any(str(name).startswith("-") for name in names):
        parts.append("--")
    return " ".join(parts + arguments)
