"""Errors icesink raised on an executor, raised again on the driver as what they are.

Spark hands the driver a task's failure as text (a Python traceback inside a JVM stack trace); the icesink
error at its end (a row that cannot be written, a record that cannot be decoded) names the table, checkpoint,
column and record, and is what the user must see, as the error it is rather than a page of py4j.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from icesink import errors

log = logging.getLogger("icesink.stream")

# The last line of a Python traceback: ``module.path.ClassName: message``.
_RAISED = re.compile(r"^(icesink(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
# The note a task adds naming the error's table (``errors.naming_table``): a JSON string, on a line of its own.
_TABLE = re.compile(rf"^{re.escape(errors.TABLE_NOTE)}(\".*\")$", re.MULTILINE)
# Raised on executors by modules that do not import icesink's error hierarchy (plain values only).
_AS = {"DecodeError": errors.BadRowError, "RefusedValue": errors.BadRowError}


def icesink_error_in(failure: BaseException) -> errors.IcesinkError | None:
    """The icesink error a failed Spark job reports, or None when the failure is not one of icesink's."""
    text = str(failure)
    found = list(_RAISED.finditer(text))
    if not found:
        return None
    raised = found[-1]
    kind = _AS.get(raised.group(2)) or getattr(errors, raised.group(2), None)
    if not (isinstance(kind, type) and issubclass(kind, errors.IcesinkError)):
        return None
    message = raised.group(3)
    noted = _TABLE.search(text, raised.end())
    table = _noted_table(noted)
    if noted is not None and table is not None:  # the message ends where its note starts: it may span lines
        message = text[raised.start(3) : noted.start()]
    return kind(message.strip(), table=table)


def _noted_table(noted: re.Match[str] | None) -> str | None:
    """The table a task's note names (None: no note, or not one icesink wrote)."""
    if noted is None:
        return None
    try:
        table = json.loads(noted.group(1))
    except ValueError:
        return None
    return table if isinstance(table, str) else None


@contextmanager
def executor_errors() -> Iterator[None]:
    """Re-raise an icesink error that failed a task as itself (on the driver); anything else as it came."""
    try:
        yield
    except errors.IcesinkError:
        raise
    except Exception as failure:
        error = icesink_error_in(failure)
        if error is None:
            raise
        log.debug("the task failure behind %s", error, exc_info=failure)
        raise error from None
