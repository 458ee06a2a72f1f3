"""Errors carry the table, checkpoint and job they are about as fields, for the committer's health report, its
command-line output and callers, and the error that stopped a query is given back as itself (driven without
Spark)."""

from __future__ import annotations

import datetime
import json
import pickle
import traceback
import urllib.request
import uuid
from pathlib import Path
from shlex import quote

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.committer.commit import TableCommitter
from icesink.committer.daemon import CommitterDaemon
from icesink.committer.observability import StatusServer
from icesink.errors import BadRowError, ConfigError, IcesinkError, ManifestError, SchemaMismatchError, naming_table
from icesink.sink.executor_errors import icesink_error_in
from icesink.sink.query_errors import QUERY_ID_PROPERTY, RUN_ID_PROPERTY, error_of, record_raised
from tests.helpers.support import create_orders_table, orders, stage_group, stage_rows, staged_in_manifests
from tests.test_cli import invoke

TABLE = "shop.orders ü"
# Its name holds TABLE's: a message naming it names TABLE too, so only the error's field tells them apart.
LINES = "shop.orders ü archive"


def break_manifest(config: CatalogConfig, identifier: str, checkpoint_id: int) -> str:
    row = next(r for r in Ledger(config).pending(identifier) if r.checkpoint_id == checkpoint_id)
    row = staged_in_manifests(config, identifier, row.job_id, checkpoint_id)  # as a release before staged it
    assert row.manifests.data is not None
    path = row.manifests.data.path
    Path(path.removeprefix("file://")).unlink()
    return path


def test_a_committers_error_names_its_table_checkpoint_and_job_as_fields(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    assert stage_rows(config, TABLE, "job ü", 0, orders(0, 1))
    assert stage_rows(config, TABLE, "job ü", 1, orders(1, 1))
    break_manifest(config, TABLE, 1)
    with pytest.raises(ManifestError) as raised:
        TableCommitter.of(config).commit_pending(TABLE)
    error = raised.value
    assert (error.table, error.checkpoint_id, error.job_id) == (TABLE, 1, "job ü")
    assert error.fields() == {
        "error": "ManifestError",
        "table": TABLE,
        "checkpoint_id": 1,
        "job_id": "job ü",
        "transient": False,
        "message": str(error),
    }


def test_a_group_blocked_by_one_table_names_that_table_for_every_table_it_holds_back(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    for identifier in (TABLE, LINES):
        create_orders_table(config, identifier)
    stage_group(config, "job", 0, {TABLE: orders(0, 1), LINES: orders(1, 1)})
    break_manifest(config, LINES, 0)
    daemon = CommitterDaemon(config, poll_interval=0.05, lease_ttl=5)
    report = daemon.run(once=True)
    assert set(report.errors) == {TABLE, LINES}
    for fields in report.errors.values():  # the error is the blocked table's, whichever table reported it
        assert (fields["table"], fields["checkpoint_id"], fields["job_id"]) == (LINES, 0, "job")
        assert fields["error"] == "ManifestError" and fields["transient"] is False
    # /healthz says the same as fields, beside the counts.
    server = StatusServer("127.0.0.1", 0, daemon.metrics, daemon.problems, daemon.jobs, daemon.failures)
    server.start()
    try:
        with pytest.raises(urllib.request.HTTPError) as unhealthy:  # a terminal error: 503 at once
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10)
        health = json.loads(unhealthy.value.read())
    finally:
        server.stop()
    failures = {f["table"]: f for f in health["failures"]}
    assert set(failures) == {TABLE, LINES}
    assert failures[TABLE]["error"]["table"] == LINES and failures[TABLE]["failures_in_a_row"] == 1
    assert failures[LINES]["error"]["checkpoint_id"] == 0
    # And the command line names the blocked table once, with the one it holds back.
    code, output = invoke(config, "committer", "run", "--once")
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].startswith(f"error: table {LINES}, job job, checkpoint 0"), output
    assert lines[0].endswith(f"(it also holds back {TABLE}, committed with it)")
    # What to run, as a shell takes it: the table's name quoted, the job named (checkpoint numbers repeat).
    assert f"`icesink checkpoints discard --job job --yes {quote(LINES)} 0`" in lines[0]
    moments = [job["oldest_pending_at"] for job in health["jobs"]]
    assert moments and all(datetime.datetime.fromisoformat(m).tzinfo is not None for m in moments), moments
    assert all("T" in m for m in moments)  # ISO 8601 as the CLI's JSON says it, not Python's str()


def test_an_error_keeps_the_fields_it_was_raised_with_and_survives_pickling() -> None:
    error = ConfigError("table a.b: no", table="a.b")
    assert error.located("c.d", 3, "job").fields()["table"] == "a.b"  # its own table is kept
    assert (error.checkpoint_id, error.job_id) == (3, "job")  # what it lacked is filled in
    # Executors send errors to the driver pickled: a subclass with fields of its own comes back whole enough.
    mismatch = pickle.loads(pickle.dumps(SchemaMismatchError("table a.b: column x", column="x", table="a.b")))
    assert isinstance(mismatch, SchemaMismatchError) and str(mismatch) == "table a.b: column x"


def test_tables_failing_each_on_its_own_with_the_same_message_are_not_said_to_hold_each_other_back() -> None:
    from icesink.cli.committer_commands import _failures
    from icesink.errors import CatalogUnavailableError

    down = "the catalog database cannot be reached"
    errors = {t: CatalogUnavailableError(down).located(t).fields() for t in (TABLE, LINES)}
    assert _failures(errors) == [f"table {TABLE}: {down}", f"table {LINES}: {down}"]


class _Context:
    """The local properties a micro-batch's thread has, as Spark sets them."""

    def __init__(self, query_id: str | None, run_id: str | None) -> None:
        self._properties = {QUERY_ID_PROPERTY: query_id, RUN_ID_PROPERTY: run_id}

    def getLocalProperty(self, name: str) -> str | None:  # Spark's name
        return self._properties.get(name)


class _Query:
    def __init__(self, query_id: str, run_id: str, failure: Exception | None = None) -> None:
        self.id, self.runId, self._failure = query_id, run_id, failure

    def exception(self) -> Exception | None:  # Spark's: what stopped the query, None while it runs
        return self._failure


def _spark_text(query_id: str, run_id: str, error: Exception) -> Exception:
    """What Spark raises for a failed micro-batch: text only (its first line, and the traceback's last)."""
    return RuntimeError(
        f"[STREAM_FAILED] Query [id = {query_id}, runId = {run_id}] terminated with exception: ...\n"
        f"{type(error).__module__}.{type(error).__name__}: {error}"
    )


def _same(given: object, raised: IcesinkError) -> bool:
    """The error kept for a run: a copy of the one raised (its class and fields), holding none of its frames."""
    assert isinstance(given, type(raised)) and given is not raised
    assert given.__traceback__ is None and given.__context__ is None
    return given.fields() == raised.fields()


def test_the_error_that_stopped_a_query_is_given_back_for_its_run_only() -> None:
    query_id, first_run, second_run, other = (str(uuid.uuid4()) for _ in range(4))
    error = SchemaMismatchError("table shop.orders ü: column 'n' ...").located(TABLE, 3, "job ü")
    record_raised(_Context(query_id, first_run), error)  # type: ignore[arg-type]

    assert _same(error_of(_spark_text(query_id, first_run, error)), error)
    assert _same(error_of(_Query(query_id, first_run)), error)
    assert error_of(_Query(query_id, second_run)) is None  # restarted since: that run did not fail
    assert error_of(RuntimeError("no query named")) is None
    assert error_of("not an exception") is None
    spark_failure = RuntimeError(f"[STREAM_FAILED] Query [id = {query_id}, runId = {second_run}] terminated: ...")
    assert error_of(_Query(query_id, second_run, spark_failure)) is None  # Spark's own failure, not icesink's

    # Raised in another process (a change stream's planning runs in Spark's Python worker): rebuilt from the text.
    elsewhere = error_of(_spark_text(other, first_run, error))
    assert isinstance(elsewhere, SchemaMismatchError) and elsewhere is not error
    assert (str(elsewhere), elsewhere.checkpoint_id) == (str(error), None)
    rebuilt = error_of(_Query(other, first_run, _spark_text(other, first_run, error)))
    assert isinstance(rebuilt, SchemaMismatchError) and str(rebuilt) == str(error)

    later = ConfigError("table shop.orders ü: ...").located(TABLE, 9, "job ü")
    record_raised(_Context(query_id, second_run), later)  # type: ignore[arg-type]
    assert _same(error_of(_Query(query_id, second_run)), later)
    assert _same(error_of(_spark_text(query_id, first_run, error)), error)  # each run keeps its own

    record_raised(_Context(None, None), later)  # type: ignore[arg-type]  # not in a query: nothing kept, no error


def test_a_wrapped_streaming_exception_gives_the_error_of_the_run_it_names() -> None:
    query_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
    error = BadRowError("table shop.orders ü, checkpoint 2: ...").located(TABLE, 2, "job ü")
    record_raised(_Context(query_id, run_id), error)  # type: ignore[arg-type]
    spark_failure = _spark_text(query_id, run_id, error)
    try:
        try:
            raise spark_failure
        except RuntimeError as inner:
            raise ValueError("the stream failed, giving up") from inner  # a supervisor's own exception
    except ValueError as outer:
        assert _same(error_of(outer), error)


@pytest.mark.parametrize("table", [TABLE, 'shop."a", b\nc', "shop.日本 %2F x"])
def test_a_task_names_its_errors_table_through_the_text_spark_hands_the_driver(table: str) -> None:
    try:
        with naming_table(table):
            raise BadRowError(f"table {table}, checkpoint 4, task 1: equality field 'id' is null")
    except BadRowError as raised:
        assert raised.table == table
        message = str(raised)
        text = "".join(traceback.format_exception(raised))  # what the Python worker hands Spark
    failure = RuntimeError(f"Job aborted: org.apache.spark.api.python.PythonException: {text}\n\tat org.apache...")
    rebuilt = icesink_error_in(failure)
    assert isinstance(rebuilt, BadRowError)
    assert rebuilt.table == table
    assert str(rebuilt) == message


def test_a_task_error_without_a_table_note_is_rebuilt_without_a_table() -> None:
    text = 'icesink.errors.BadRowError: Kafka topic t, partition 0, offset 5: not JSON\nicesink table: "unclosed'
    rebuilt = icesink_error_in(RuntimeError(text))
    assert isinstance(rebuilt, BadRowError)
    assert rebuilt.table is None


def test_an_icesink_error_or_one_it_caused_is_its_own_error() -> None:
    error = ManifestError("table shop.orders ü: ...").located(TABLE, 1, "job ü")
    assert error_of(error) is error
    try:
        try:
            raise error
        except ManifestError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert error_of(outer) is error


def test_error_of_is_public() -> None:
    import icesink

    assert icesink.error_of is error_of
    assert "error_of" in icesink.__all__
