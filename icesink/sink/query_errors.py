"""The icesink error that stopped a streaming query, as the error it is.

Spark hands a failure inside ``foreachBatch`` to the caller as a ``StreamingQueryException`` that keeps only
text: the error's class, table, checkpoint, job and whether retrying can help are gone. The micro-batch handler
runs in the driver's Python process, so it keeps the last error it raised for each query, with the run it
happened in; :func:`error_of` gives it back for the query, or for the exception Spark raised.
"""

from __future__ import annotations

import copy
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from icesink.errors import IcesinkError
from icesink.sink.executor_errors import icesink_error_in

if TYPE_CHECKING:
    from pyspark import SparkContext

QUERY_ID_PROPERTY = "sql.streaming.queryId"  # persisted in the checkpoint location: stable across restarts
# Spark runs a query's micro-batches in a job group named by the run's id.
RUN_ID_PROPERTY = "spark.jobGroup.id"
# Runs whose error is kept: a run ends at its error, so one a restart of a query; bounded all the same.
KEPT_RUNS = 256
# How Spark names the query in the text of its StreamingQueryException.
_QUERY = re.compile(r"\[id = ([0-9a-f-]{36}), runId = ([0-9a-f-]{36})\]")

_raised: OrderedDict[tuple[str, str | None], IcesinkError] = OrderedDict()  # by query id and run id
_lock = threading.Lock()


def record_raised(context: SparkContext, error: IcesinkError) -> None:
    """A micro-batch of the query running in ``context``'s thread raised ``error`` (nothing is kept outside a
    query)."""
    try:
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        run_id = context.getLocalProperty(RUN_ID_PROPERTY)
    except Exception:  # a driver whose JVM is going: the error being raised matters more
        return
    if not query_id:
        return
    try:
        kept = copy.copy(error)  # without the frames and exceptions it holds: the handler, the micro-batch, py4j's
    except Exception:  # an error that cannot be made again from its arguments: the one being raised matters more
        return
    kept.__traceback__, kept.__cause__, kept.__context__ = None, None, None
    with _lock:
        _raised[(query_id, run_id or None)] = kept
        while len(_raised) > KEPT_RUNS:
            _raised.popitem(last=False)


def error_of(failure: Any) -> IcesinkError | None:
    """The :class:`~icesink.errors.IcesinkError` that stopped a stream, with its class and fields.

    ``failure`` is the ``StreamingQueryException`` that ``awaitTermination()`` or ``processAllAvailable()``
    raised, or the ``StreamingQuery`` itself (which :func:`icesink.stream` returned), or any exception: one that
    is an ``IcesinkError``, or was raised from one or from such a ``StreamingQueryException`` (a wrapper's
    ``raise ... from``), gives that error. ::

        try:
            query.awaitTermination()
        except StreamingQueryException as e:
            error = icesink.error_of(e)
            if error is not None and error.transient:
                ...  # start the stream again

    Each run of a query (a restart from the same checkpoint location is a new run) keeps its own: a query object
    gives its latest run's, an exception the run it names. An error raised outside the driver's own Python
    process (a change stream's source planning in Spark's Python worker, say) is rebuilt from Spark's text: its
    class and message, with ``table`` where a task named it and no checkpoint or job. None when the query did
    not stop on an error of icesink's (Spark's own failure, a bug).
    """

    # What the handler raised is kept as a copy: the same class and fields, not the same object.
    if _is_query(failure):
        kept = _kept(str(failure.id), str(failure.runId))
        stopped = failure.exception() if kept is None else None
        return kept if stopped is None else icesink_error_in(stopped)
    if not isinstance(failure, BaseException):
        return None
    seen: set[int] = set()
    cause: BaseException | None = failure
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, IcesinkError):
            return cause
        named = _QUERY.search(str(cause))
        if named is not None:
            return _kept(named.group(1), named.group(2)) or icesink_error_in(cause)
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _is_query(failure: Any) -> bool:
    """A ``StreamingQuery`` (told apart without importing pyspark: an exception has no ``runId``)."""
    return not isinstance(failure, BaseException) and hasattr(failure, "runId") and hasattr(failure, "id")


def _kept(query_id: str, run_id: str) -> IcesinkError | None:
    with _lock:
        kept = _raised.get((query_id, run_id))
        return kept if kept is not None else _raised.get((query_id, None))  # a run Spark did not name
