"""What the committer does once partitions are done: a ``_SUCCESS`` file in the partition's directory and an HTTP
POST, as the table's properties ask (``icesink.partition-done.*``), and a stream's own Python callback
(``icesink.stream(..., on_partition_done=...)``).

They run after the commit that made the partitions done, never inside it: a failure is logged and the action
tried again after the table's next commit, so it can lose nothing; while no commit comes, the committer daemon
(:func:`retry_waiting`) and the inline committer's driver (:class:`ActionRetrier`) try the actions that wait again
every ``RETRY_SECONDS``. They run on the committer's path, so a
receiver that does not answer delays the next commit by at most one timeout: after a failure the others wait for
the next commit, and at most ``ACTIONS_PER_COMMIT`` partitions get theirs per commit. The ``_SUCCESS`` file is
written for ``main`` only (a branch's rows are not where readers of the directory look), in the layout of the
table's current partition spec (a partition of an earlier spec gets none). Each action runs at least
once per partition (a committer that dies between the commit and the action leaves it to the next commit); the
JSON they carry names the snapshot that made the partition done, so a repeat can be recognised.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import load_table, open_catalog
from icesink.catalog.partition_record import PartitionRecord
from icesink.errors import IcesinkError
from icesink.failpoints import failpoint
from icesink.iceberg.describe import writer_spec
from icesink.properties import HTTP_POST_PROPERTY, SUCCESS_FILE_PROPERTY
from icesink.writer.partitioning import partition_path

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from icesink.catalog.partition_record import PartitionStatus

log = logging.getLogger("icesink.committer")

# The marker's name, as Hadoop's and Flink's file sinks write it.
SUCCESS_FILE = "_SUCCESS"
# A receiver that does not answer holds a commit's path back by at most this, for one partition: the others wait
# for the next commit, as do partitions beyond ACTIONS_PER_COMMIT (a backlog, or actions newly set on an old table).
HTTP_TIMEOUT_SECONDS = 5
ACTIONS_PER_COMMIT = 16
# How often the daemon tries waiting actions again between commits; it stops at the first that fails.
RETRY_SECONDS = 30.0
# A table with done partitions but no action set is looked at again after this long (its partitions wait, in case
# actions are set later), not at every retry.
QUIET_SECONDS = 600.0


class DoneActions:
    """Runs a table's done actions for the partitions that have not had them."""

    def __init__(self, config: CatalogConfig, callback: Callable[[dict[str, object]], None] | None = None) -> None:
        self._record = PartitionRecord(config)
        self._callback = callback

    def configured(self, table: Table) -> bool:
        """Whether the table (or the stream) asks for any done action."""
        properties = table.properties
        success_file = properties.get(SUCCESS_FILE_PROPERTY, "false").strip().lower() == "true"
        return success_file or bool(properties.get(HTTP_POST_PROPERTY)) or self._callback is not None

    def run(self, table: Table, identifier: str, branch: str) -> bool:
        """The actions of the partitions that wait for them, up to ``ACTIONS_PER_COMMIT``; False when one failed
        (logged; it waits for the next try)."""
        if not self.configured(table):
            return True
        properties = table.properties
        success_file = properties.get(SUCCESS_FILE_PROPERTY, "false").strip().lower() == "true"
        url = properties.get(HTTP_POST_PROPERTY)
        failpoint("committer.before-done-actions")  # the commit is in; its actions are not
        try:
            self._record.keep_up(table, identifier, branch)
            for status in self._record.awaiting_actions(identifier, branch)[:ACTIONS_PER_COMMIT]:
                described = _described(identifier, branch, status)
                body = json.dumps(described, ensure_ascii=False).encode("utf-8")
                if success_file and branch == MAIN_BRANCH:  # a branch's partitions are not where readers look
                    self._write_marker(table, identifier, status, body)
                if url:
                    _post(url, body)
                if self._callback is not None:
                    self._callback(dict(described))
                self._record.actions_done(identifier, branch, status)
        except Exception as e:  # after the commit: it is in; the action waits for the table's next commit
            log.warning(
                "table=%s: a partition-done action failed (%s); it is tried again after the next commit", identifier, e
            )
            return False
        return True

    def _write_marker(self, table: Table, identifier: str, status: PartitionStatus, body: bytes) -> None:
        spec = writer_spec(table, identifier, "done-actions")
        if status.spec_id != spec.spec_id:
            return  # a partition of an earlier spec: its directory is not the current layout's
        values = tuple(status.values)
        directory = f"{spec.data_location.rstrip('/')}/{partition_path(spec, values)}"  # type: ignore[arg-type]
        with table.io.new_output(f"{directory}/{SUCCESS_FILE}").create(overwrite=True) as out:
            out.write(body)


def _described(identifier: str, branch: str, status: PartitionStatus) -> dict[str, object]:
    return {
        "table": identifier,
        "branch": branch,
        "partition": status.path,
        "watermark": status.done_watermark,
        "snapshot_id": status.done_snapshot_id,
        "done_at": status.done_at.isoformat() if status.done_at else None,
    }


def _post(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
        if not 200 <= response.status < 300:
            raise OSError(f"POST {url} answered {response.status}")


def retry_waiting(
    catalog: SqlCatalog,
    config: CatalogConfig,
    scope: Collection[str] = (),
    skip: Collection[str] = (),
    quiet: dict[str, float] | None = None,
    callback: Callable[[dict[str, object]], None] | None = None,
) -> int:
    """Try the done actions that wait (their first try failed, and no commit came since), table by table, until
    one fails again (a receiver that is down delays the daemon by one timeout, not one per table). ``scope``: only
    these tables (default all); ``skip``: tables that just had their try; ``quiet``: tables found without actions,
    each with when to look again (kept by the caller between retries); ``callback``: the stream's own action.
    Returns the tables tried."""
    actions = DoneActions(config, callback)
    quiet = quiet if quiet is not None else {}
    tried = 0
    for identifier, branch in PartitionRecord(config).awaiting_tables():
        if (scope and identifier not in scope) or identifier in skip or quiet.get(identifier, 0.0) > time.monotonic():
            continue
        try:
            table = load_table(catalog, config, identifier)
        except IcesinkError as e:
            log.warning("table=%s: partition-done actions not tried again: %s", identifier, e)
            continue
        if not actions.configured(table):
            quiet[identifier] = time.monotonic() + QUIET_SECONDS
            continue
        tried += 1
        if not actions.run(table, identifier, branch):
            break
    return tried


class ActionRetrier:
    """The inline committer's second tries: done actions that failed after a commit are tried again every
    ``RETRY_SECONDS`` by a thread of the driver, since the stream may have no commit to run them after for hours.

    The thread runs only while actions of the stream's tables wait, and ends when none is left; ``lock`` is held
    while it tries, and by the stream while it commits, so that the two never run one partition's actions at once.
    """

    def __init__(
        self, config: CatalogConfig, callback: Callable[[dict[str, object]], None] | None, lock: threading.Lock
    ) -> None:
        self._config = config
        self._callback = callback
        self._lock = lock
        self._guard = threading.Lock()  # over the fields below
        self._tables: set[str] = set()
        self._thread: threading.Thread | None = None

    def waiting(self, tables: Collection[str]) -> None:
        """These tables' actions failed after their commit: try them again until they pass."""
        if not tables:
            return
        with self._guard:
            self._tables |= set(tables)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="icesink-done-actions", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        catalog = open_catalog(self._config)
        while True:
            time.sleep(RETRY_SECONDS)
            with self._guard:
                tables = set(self._tables)
            left: set[str] = set(tables)
            try:
                with self._lock:
                    tried = retry_waiting(catalog, self._config, tables, callback=self._callback)
                # None tried: the tables no longer ask for actions (their properties changed), nothing to wait for.
                waiting = {identifier for identifier, _ in PartitionRecord(self._config).awaiting_tables()}
                left = waiting & tables if tried else set()
            except Exception as e:  # the catalog away for a moment: the next turn tries again
                log.warning("partition-done actions of %s not tried again: %s", ", ".join(sorted(tables)), e)
            with self._guard:
                self._tables = left | (self._tables - tables)  # and any that failed meanwhile
                if not self._tables:
                    self._thread = None
                    return
