"""Errors icesink raised on an executor, raised again on the driver as what they are.

Spark hands the driver a task's failure as text (a Python traceback inside a JVM stack trace); the icesink
error at its end (a row that cannot be written, a record that cannot be decoded) names the table, checkpoint,
column and record, and is what the user must see, as the error it is rather than a page of py4j.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from icesink import errors

log = logging.getLogger("icesink.stream")

# The last line of a Python traceback: ``module.path.ClassName: message``.
_RAISED = re.compile(r"^(icesink(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
# Raised on executors by modules that do not import icesink's error hierarchy (plain values only).
_AS = {"DecodeError": errors.BadRowError, "RefusedValue": errors.BadRowError}


def icesink_error_in(failure: BaseException) -> errors.IcesinkError | None:
    """The icesink error a failed Spark job reports, or None when the failure is not one of icesink's."""
    found = _RAISED.findall(str(failure))
    if not found:
        return None
    _, name, message = found[-1]
    kind = _AS.get(name) or getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, errors.IcesinkError)):
        return None
    return kind(message.strip())


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
