"""Who publishes a table's branch: the stream that met the table last, as it said, within the committer's scope.

Driven without Spark (the real ledger, committer daemon and publishers; :mod:`tests.helpers.branch_streams`): an
older stream's declaration never moves main once another stream took the table over; every table publishes by
its own policy unless it is committed with others; a daemon with ``--table`` moves main of its tables only; a
broken table or check never stops the daemon; its pass on its own looks only at what changed, in bounded slices;
and a driver's publish timer ends with its query.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from icesink import checks
from icesink.audit.publish_policy import PublishSettings
from icesink.catalog.audit_record import AuditRecord
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.catalog.publishing_record import PublishingRecord
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.daemon import CommitterDaemon
from icesink.committer.declared_publishing import DeclaredPublishers, declare_publishing
from icesink.table_ref import TableRef
from tests.helpers.branch_streams import BRANCH, BranchStream, another_tools_table, ids_at
from tests.helpers.support import create_orders_table, orders
from tests.test_write_audit_publish import negative

HOSTILE = "db.ä %/x'\"_"  # quotes, wildcards of LIKE, a slash and a non-ASCII letter
SAFE = (checks.not_null("id"), checks.in_range("amount", min=0))
WEAK = (checks.not_null("id"),)


def settings(publish: str | None = None) -> PublishSettings:
    return PublishSettings.of(publish, True, "continue", "db")


def branches(tables: list[str], audit: tuple[Any, ...] = SAFE, publish: str | None = None) -> list[AuditedBranch]:
    own = settings(publish) if publish is not None else None
    return [AuditedBranch(TableRef(t, BRANCH), audit, own) for t in tables]


def declared_stream(config: CatalogConfig, job: str, tables: list[str]) -> BranchStream:
    """New tables, and a stream into them whose daemon publishes them apart, with the safe checks."""
    for name in tables:
        create_orders_table(config, name)
    declare_publishing(config, job, branches(tables), settings(), atomic=False)
    return BranchStream(config, tables, SAFE, job=job, atomic=False)


def test_a_table_publishes_as_the_stream_that_met_it_last_says(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    table = "db.a"
    create_orders_table(config, table)
    declare_publishing(config, "old", branches([table], WEAK), settings(), atomic=False)  # a daemon stream, once
    new = BranchStream(config, [table], SAFE, job="new", atomic=False)
    declare_publishing(config, "new", branches([table]), settings(), atomic=False)  # restarted with strict checks
    assert [d.job_id for d in PublishingRecord(config).of_tables([table])] == ["new"]
    new.batch({table: negative(0, 1)}, commit=False)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    daemon.run(once=True)
    assert ids_at(config, table, BRANCH) == [0] and ids_at(config, table) == []  # the old weak checks are gone
    assert daemon.audits()[0]["table"] == table

    # Now an inline stream writes the table, publishing only by hand: the daemon leaves its main alone.
    declare_publishing(config, "inline", [], settings("manual"), atomic=False, others=[TableRef(table, BRANCH)])
    assert PublishingRecord(config).of_tables([table]) == []
    inline = BranchStream(config, [table], WEAK, job="inline", atomic=False, publish="manual")
    inline.batch({table: orders(1, 1)})
    daemon.run(once=True)
    assert ids_at(config, table, BRANCH) == [0, 1] and ids_at(config, table) == []


def test_each_table_publishes_by_its_own_policy_unless_committed_with_others(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    tables = ["db.every", "db.manual", "db.hourly"]
    for name in tables:
        create_orders_table(config, name)
    own = [*branches(tables[:1], publish="checkpoint"), *branches(tables[1:2], publish="manual")]
    own += branches(tables[2:], publish="1 hour")
    declare_publishing(config, "job", own, settings(), atomic=False)
    stream = BranchStream(config, tables, SAFE, atomic=False)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    for first in (0, 1):
        stream.batch({t: orders(first, 1) for t in tables}, commit=False)
        daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0, 1], [], [0]]  # the hour holds the second back

    # Inline, the same: each branch's own settings, the stream's only where a branch has none.
    on_branch = [TableRef(t, BRANCH) for t in tables]
    declare_publishing(config, "inline", [], settings(), atomic=False, others=on_branch)  # as its driver does
    inline = BranchStream(config, tables, SAFE, job="inline", atomic=False, publish="manual")
    for branch in own:
        inline.publisher.add(branch)
    inline.batch({t: orders(2, 1) for t in tables})  # a new driver's first publish is at once
    inline.batch({t: orders(3, 1) for t in tables})
    assert [ids_at(config, t) for t in tables] == [[0, 1, 2, 3], [], [0, 1, 2]]


def test_a_committer_with_table_moves_main_of_its_tables_only(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    tables = ["db.a", "db.b"]
    declared_stream(config, "apart", tables).batch({t: orders(0, 1) for t in tables})
    assert [ids_at(config, t) for t in tables] == [[0], [0]]  # the inline commit published; now a later one:
    stream = BranchStream(config, tables, SAFE, job="apart", atomic=False, checkpoint=1)
    stream.batch({t: orders(1, 1) for t in tables}, commit=False)
    stream.committer.commit_pending(tables[1], "apart")  # b is committed, by its own committer, unpublished
    CommitterDaemon(config, tables=[tables[0]], lease_ttl=4, publish_check_seconds=0).run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0, 1], [0]]

    # A group committed together publishes together: a committer that covers part of it publishes none of it.
    for name in ("db.c", "db.d"):
        create_orders_table(config, name)
    group = BranchStream(config, ["db.c", "db.d"], SAFE, job="group")
    declare_publishing(config, "group", branches(["db.c", "db.d"]), settings(), atomic=True)
    group.batch({"db.c": orders(0, 1), "db.d": orders(0, 1)}, commit=False)
    group.committer.commit_atomic("group")
    publishers = DeclaredPublishers(open_catalog(config), config, Ledger(config), scope=["db.c"])
    (report,) = publishers.every_job(lambda: None, budget_seconds=60)
    assert not report.published and "leaves out db.d" in report.held[0]
    assert [ids_at(config, t) for t in ("db.c", "db.d")] == [[], []]


def test_a_broken_table_or_check_never_stops_the_daemon(
    sqlite_catalog: CatalogConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = sqlite_catalog
    tables = ["db.broken", "db.fine"]
    for name in tables:
        create_orders_table(config, name)
    for job, table in zip(("broken", "fine"), tables, strict=True):
        declare_publishing(config, job, branches([table]), settings(), atomic=False)
        BranchStream(config, [table], SAFE, job=job, atomic=False).batch({table: orders(0, 1)}, commit=False)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0], [0]]
    broken = BranchStream(config, tables[:1], SAFE, job="broken", atomic=False, checkpoint=1)
    broken.batch({tables[0]: orders(1, 1)}, commit=False)
    broken.committer.commit_pending(tables[0], "broken")  # on the branch, not audited yet
    table = open_catalog(config).load_table(tables[0])
    head = table.snapshot_by_name(BRANCH)
    assert head is not None
    (added,) = [
        e.data_file.file_path
        for m in head.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io)
        if e.snapshot_id == head.snapshot_id
    ]
    Path(added.removeprefix("file://")).unlink()  # its data file lost: the audit cannot read what it added
    BranchStream(config, tables[1:], SAFE, job="fine", checkpoint=1).batch({tables[1]: orders(1, 1)}, commit=False)
    daemon.run(once=True)  # its pass on its own meets the broken table too
    assert ids_at(config, tables[1]) == [0, 1]  # the other job went on

    # A check whose module the committer cannot import holds publishing, until the module is there.
    create_orders_table(config, "db.custom")
    custom = AuditedBranch(TableRef("db.custom", BRANCH), (checks.not_null("id"),))
    declare_publishing(config, "custom", [custom], settings(), atomic=False)
    record = PublishingRecord(config)
    (declared,) = record.of_job("custom")
    lost = {"name": "later_check", "function": "later_checks_module:later_check"}
    record.take_over([], "custom", [dataclasses.replace(declared, checks=(lost,))])
    custom_stream = BranchStream(config, ["db.custom"], SAFE, job="custom", atomic=False)
    custom_stream.batch({"db.custom": orders(0, 1)}, commit=False)
    daemon.run(once=True)
    assert ids_at(config, "db.custom") == [] and "cannot be imported" in str(daemon.audits())
    assert AuditRecord(config).of_branch("db.custom", BRANCH) == {}  # not audited: no failure the check did not find
    (tmp_path / "later_checks_module.py").write_text("def later_check(audit):\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    daemon.run(once=True)  # installed: audited and published, with no checkpoint after
    assert ids_at(config, "db.custom") == [0] and daemon.audits() == []
    sys.modules.pop("later_checks_module", None)


def test_the_pass_on_its_own_looks_at_what_changed_in_slices(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    tables = ["db.a", "db.b", "db.c"]
    for name in tables:
        create_orders_table(config, name)
        declare_publishing(config, f"job {name}", branches([name]), settings(), atomic=False)
        BranchStream(config, [name], SAFE, job=f"job {name}", atomic=False).batch({name: orders(0, 1)}, commit=False)
    CommitterDaemon(config, lease_ttl=4).run(once=True)  # commits and publishes each after its commit
    publishers = DeclaredPublishers(open_catalog(config), config, Ledger(config))
    looked = [len(publishers.every_job(lambda: None, budget_seconds=0)) for _ in range(3)]
    assert looked == [1, 1, 1] and not publishers.unfinished  # a job a slice, resumed where the last stopped
    assert publishers.every_job(lambda: None, budget_seconds=60) == []  # nothing changed: no table loaded
    open_catalog(config).load_table("db.b").append(orders(5, 1), branch=BRANCH)  # another tool writes b's branch
    (report,) = publishers.every_job(lambda: None, budget_seconds=60)
    assert report.published == {"db.b": open_catalog(config).load_table("db.b").refs()[BRANCH].snapshot_id}
    publishers.look_at_everything()
    assert len(publishers.every_job(lambda: None, budget_seconds=60)) == 3


def test_a_later_stream_of_the_driver_takes_over_only_the_tables_it_meets(sqlite_catalog: CatalogConfig) -> None:
    from icesink.committer.claims import claim, new_token
    from icesink.committer.publish_timer import PublishTimer

    config = sqlite_catalog
    tables = ["db.a", "db.b"]
    for name in tables:
        create_orders_table(config, name)
    stream = BranchStream(config, tables, SAFE, publish="1 second", atomic=False)
    first, later = new_token(), new_token()
    for name in tables:
        claim(first, config.name, TableRef(name, BRANCH))
    stream.publisher._token = first
    stream.batch({t: orders(0, 1) for t in tables})
    stream.batch({t: orders(1, 1) for t in tables})  # held back for the interval
    timer = PublishTimer(stream.publisher, threading.Lock())
    timer.committed(stream.job)
    claim(later, config.name, TableRef("db.a", BRANCH))  # a later stream of the driver (same job)
    claim(later, "another catalog", TableRef("db.b", BRANCH))  # a table of the same name elsewhere is not this one
    claim(later, config.name, TableRef("db.b", "backfill"))  # nor another branch of the table
    deadline = time.monotonic() + 10
    while timer._thread is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert timer._thread is None
    assert [ids_at(config, t) for t in tables] == [[0], [0, 1]]  # a: the later stream's now; b: still its own


def test_an_old_group_never_publishes_a_table_another_stream_took_over(sqlite_catalog: CatalogConfig) -> None:
    """A job committed atomically publishes the tables of its earlier runs with the ones it meets now (they move
    together), but not one another stream met since: that one publishes it, here by hand."""
    config = sqlite_catalog
    t1, t2 = "db.t1", "db.t2"
    for name in (t1, t2):
        create_orders_table(config, name)
    declare_publishing(config, "X", branches([t1, t2]), settings(), atomic=True)
    x = BranchStream(config, [t1, t2], SAFE, job="X")
    x.batch({t1: orders(0, 1), t2: orders(0, 1)}, commit=False)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in (t1, t2)] == [[0], [0]]
    superseded = declare_publishing(config, "Y", [], settings("manual"), atomic=False, others=[TableRef(t1, BRANCH)])
    assert [(d.identifier, d.job_id) for d in superseded] == [(t1, "X")]
    BranchStream(config, [t1], (), job="Y", atomic=False, publish="manual").batch({t1: orders(100, 1)})
    x.batch({t2: orders(1, 1)}, commit=False)  # X goes on, into t2 only
    daemon.run(once=True)
    assert [ids_at(config, t) for t in (t1, t2)] == [[0], [0, 1]]  # t1 is Y's; X's group is t2 now


def test_a_run_once_publishes_every_job_whatever_the_budget(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cron job of ``committer run --once`` is a new process each time: no later run resumes its pass."""
    from icesink.committer import daemon_publishing

    monkeypatch.setattr(daemon_publishing, "PUBLISH_PASS_SECONDS", 0.0)  # the first job fills the slice
    config = sqlite_catalog
    for job in ("a", "b", "c"):
        declared = f"db.{job}"
        create_orders_table(config, declared)
        declare_publishing(config, job, branches([declared]), settings(), atomic=False)
        stream = BranchStream(config, [declared], SAFE, job=job, atomic=False)
        stream.batch({declared: orders(0, 1)}, commit=False)
        stream.committer.commit_pending(declared, job)  # committed; its committer died before publishing
    CommitterDaemon(config, lease_ttl=4).run(once=True)
    assert [ids_at(config, f"db.{job}") for job in "abc"] == [[0], [0], [0]]


def test_of_two_streams_taking_a_table_over_at_once_the_newest_counts(catalog_config: CatalogConfig) -> None:
    """On PostgreSQL two take-overs at the same moment may both leave their row; readers count the newest."""
    import datetime

    from icesink.catalog.publishing_record import Declared, publishing

    config = catalog_config
    record = PublishingRecord(config)
    at = datetime.datetime(2026, 11, 28, tzinfo=datetime.UTC)
    rows = [
        {
            "catalog_name": config.name,
            "table_identifier": HOSTILE,
            "job_id": job,
            "branch": BRANCH,
            "atomic": False,
            "policy": policy,
            "interval_seconds": 0.0,
            "checks": "[]",
            "declared_at": at + datetime.timedelta(seconds=s),
        }
        for job, policy, s in (("old", "checkpoint", 0), ("new", "none", 1))
    ]
    from icesink.catalog.database import engine

    with engine(config).begin() as connection:
        connection.execute(publishing.insert(), rows)
    (owner,) = record.owners([TableRef(HOSTILE, BRANCH)]).values()
    assert owner.job_id == "new"
    assert record.of_tables([HOSTILE]) == [] and record.of_job("old") == []  # "new" publishes it inline
    record.take_over([], "old", [Declared(HOSTILE, "old", BRANCH, False, "checkpoint", 0.0, ())])
    assert [d.job_id for d in record.of_tables([HOSTILE])] == ["old"]
    record.take_over([TableRef(HOSTILE, BRANCH), TableRef(HOSTILE.upper(), BRANCH)], "inline", [])  # another spelling
    assert (
        record.of_tables([HOSTILE]) == []
        and record.owners([TableRef(HOSTILE, BRANCH)])[TableRef(HOSTILE, BRANCH)].job_id == "inline"
    )
    assert record.owners([TableRef(HOSTILE, "other")]) == {}  # another branch of it is nobody's


def test_an_idle_inline_stream_publishes_another_tools_fix_of_its_branch(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from icesink.committer import publish_timer
    from icesink.committer.publish_timer import PublishTimer

    monkeypatch.setattr(publish_timer, "FIX_LOOK_SECONDS", 0.5)
    config = sqlite_catalog
    create_orders_table(config, "db.a")
    stream = BranchStream(config, ["db.a"], SAFE)
    stream.batch({"db.a": orders(0, 1)})
    stream.batch({"db.a": negative(1, 2)})  # a failed audit holds main; then the source goes quiet
    assert ids_at(config, "db.a") == [0] and stream.publisher.held_by_audit()
    timer = PublishTimer(stream.publisher, threading.Lock())
    timer.committed(stream.job)
    time.sleep(1.2)
    assert ids_at(config, "db.a") == [0]  # looked at, nothing new: held
    open_catalog(config).load_table("db.a").delete("amount < 0", branch=BRANCH)  # another tool's fix
    deadline = time.monotonic() + 15
    while ids_at(config, "db.a") != [0, 2] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ids_at(config, "db.a") == [0, 2]  # audited with everything since main, published
    while timer._thread is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert timer._thread is None and not stream.publisher.held_by_audit()  # nothing held: the thread ended


def test_streams_into_other_branches_of_a_table_leave_each_other_alone(sqlite_catalog: CatalogConfig) -> None:
    """A one-off backfill into another branch, published by hand, does not stop a live stream's publishing; and a
    stream's own restart with another committer takes its branch back from the daemon."""
    config = sqlite_catalog
    create_orders_table(config, "db.t")
    live = BranchStream(config, ["db.t"], SAFE, job="live", atomic=False)
    declare_publishing(config, "live", [], settings(), atomic=False, others=[TableRef("db.t", BRANCH)])
    live.batch({"db.t": orders(0, 1)})
    declare_publishing(config, "backfill", [], settings("manual"), atomic=False, others=[TableRef("db.t", "backfill")])
    live.batch({"db.t": orders(1, 1)})
    assert ids_at(config, "db.t") == [0, 1]

    # The same job, once the daemon's, restarted inline publishing by hand: the daemon leaves its branch alone.
    create_orders_table(config, "db.u")
    declare_publishing(config, "J", branches(["db.u"]), settings(), atomic=False)
    declare_publishing(config, "J", [], settings("manual"), atomic=False, others=[TableRef("db.u", BRANCH)])
    BranchStream(config, ["db.u"], (), job="J", atomic=False, publish="manual").batch({"db.u": orders(0, 1)})
    CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0).run(once=True)
    assert ids_at(config, "db.u", BRANCH) == [0] and ids_at(config, "db.u") == []


def test_a_dropped_table_holds_neither_its_job_nor_the_health_report(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    tables = ["db.a", "db.b"]
    stream = declared_stream(config, "J", tables)
    stream.batch({"db.a": negative(0, 1), "db.b": orders(0, 1)}, commit=False)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[], [0]] and [h["table"] for h in daemon.audits()] == ["db.a"]
    open_catalog(config).rename_table("db.a", "db.a2")
    stream.tables = ["db.b"]
    stream.batch({"db.b": orders(1, 1)}, commit=False)
    daemon.run(once=True)
    assert ids_at(config, "db.b") == [0, 1] and daemon.audits() == []
    assert [d.identifier for d in PublishingRecord(config).of_job("J")] == ["db.b"]


def test_an_operators_audit_runs_the_checks_of_the_stream_that_writes_the_branch_now(
    sqlite_catalog: CatalogConfig,
) -> None:
    from tests.test_write_audit_publish import cli_run

    config = sqlite_catalog
    create_orders_table(config, "db.a")
    declare_publishing(config, "old", branches(["db.a"], WEAK), settings(), atomic=False)
    BranchStream(config, ["db.a"], WEAK, job="old", atomic=False).batch({"db.a": orders(0, 1)}, commit=False)
    CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0).run(once=True)
    declare_publishing(config, "new", branches(["db.a"], SAFE), settings(), atomic=False)  # stricter
    new = BranchStream(config, ["db.a"], SAFE, job="new", atomic=False)
    new.batch({"db.a": negative(1, 1)}, commit=False)
    new.committer.commit_pending("db.a", "new")  # not audited yet
    audited = cli_run(config, "audit", "db.a", "--branch", BRANCH)
    assert audited.exit_code == 1 and "in_range(amount" in audited.output  # the new stream's check, not the old
    CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0).run(once=True)
    assert ids_at(config, "db.a") == [0]


def test_a_table_created_again_under_a_declared_name_is_not_published_with_the_old_streams_checks(
    own_catalog: CatalogConfig,
) -> None:
    """What a stream declared for the daemon was of the table of the name then: once it is dropped and created
    again, the daemon neither audits nor publishes the new table by it (it forgets it), an operator's audit does
    not run its checks, and a stream that declares the new table publishes it by its own."""
    from tests.test_write_audit_publish import cli_run

    config = own_catalog  # a database of its own: the schema goes back and forth
    declared_stream(config, "J", [HOSTILE]).batch({HOSTILE: orders(0, 1)}, commit=False)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    daemon.run(once=True)
    assert ids_at(config, HOSTILE) == [0]
    catalog = open_catalog(config)
    old_uuid = str(catalog.load_table(HOSTILE).metadata.table_uuid)
    # Declarations made before they said which table (a database taken back to 0016 and migrated again) take the
    # uuid of the job's newest checkpoint of the table in the ledger.
    assert cli_run(config, "db", "downgrade", "0016").exit_code == 0
    assert cli_run(config, "db", "upgrade").exit_code == 0
    [old] = PublishingRecord(config).of_job("J")
    assert old.table_uuid == old_uuid

    catalog.drop_table(HOSTILE)
    new_uuid = another_tools_table(config, HOSTILE)  # with a branch of the name nobody audited
    audited = cli_run(config, "audit", HOSTILE, "--branch", BRANCH)  # not the old stream's checks
    assert audited.exit_code == 2 and "of an earlier table of the name" in audited.output, audited.output
    daemon.run(once=True)
    assert ids_at(config, HOSTILE) == [100] and AuditRecord(config).of_branch(HOSTILE, BRANCH, new_uuid) == {}
    assert PublishingRecord(config).of_job("J") == []  # forgotten: the next pass does not look again
    daemon.run(once=True)
    assert ids_at(config, HOSTILE) == [100]

    # A stream that meets the new table declares it anew; the old declaration forgotten late leaves it alone.
    declare_publishing(config, "K", branches([HOSTILE], WEAK), settings(), atomic=False)
    [new] = PublishingRecord(config).of_job("K")
    assert new.table_uuid == new_uuid
    PublishingRecord(config).forget_declared(dataclasses.replace(new, table_uuid=old_uuid))
    assert PublishingRecord(config).of_job("K") == [new]
    daemon.run(once=True)
    assert ids_at(config, HOSTILE) == [100, 101]
    [entry] = AuditRecord(config).of_branch(HOSTILE, BRANCH, new_uuid).values()
    assert entry.passed and [c["check"] for c in entry.checks] == ["not_null"]


def test_a_running_stream_declares_a_table_created_again_under_its_feet_anew(catalog_config: CatalogConfig) -> None:
    """A stream runs on while its table is dropped and created again: it writes the new table from then on (it
    loads its tables every micro-batch), so it declares the new table as its own, and the daemon audits and
    publishes its rows there by its checks; an atomic stream's checkpoints reach both tables' main together."""
    from icesink.sink.branch_declarations import BranchDeclarations

    config = catalog_config
    tables = [HOSTILE, "db.b"]
    for name in tables:
        create_orders_table(config, name)
    stream = BranchStream(config, tables, SAFE, job="J", atomic=True)
    declarations = BranchDeclarations(config, settings(), atomic=True)  # the stream's, as its micro-batches use it
    for branch in branches(tables):
        declarations.met(branch.ref, branch)

    def uuids() -> dict[str, str]:
        catalog = open_catalog(config)
        return {name: str(catalog.load_table(name).metadata.table_uuid) for name in tables}

    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    declarations.take_over("J", uuids())
    stream.batch({t: orders(0, 1) for t in tables}, commit=False)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0], [0]]
    [first, _] = PublishingRecord(config).of_job("J")
    declarations.take_over("J", uuids())  # the same tables: nothing declared again
    assert PublishingRecord(config).of_job("J")[0].declared_at == first.declared_at

    open_catalog(config).drop_table(HOSTILE)
    create_orders_table(config, HOSTILE)  # by an operator, between two micro-batches
    for checkpoint in (1, 2):
        declarations.take_over("J", uuids())  # each micro-batch, with the tables as it loaded them
        stream.batch({t: orders(checkpoint, 1) for t in tables}, commit=False)
        daemon.run(once=True)
        assert [ids_at(config, t) for t in tables] == [list(range(1, checkpoint + 1)), list(range(checkpoint + 1))]
    now = uuids()
    assert {d.identifier: d.table_uuid for d in PublishingRecord(config).of_job("J")} == now
    [entry] = [e for e in AuditRecord(config).of_branch(HOSTILE, BRANCH, now[HOSTILE]).values() if e.checkpoint_id == 2]
    assert entry.passed and [c["check"] for c in entry.checks] == ["not_null", "in_range"]


def test_a_partner_dropped_and_later_created_again_by_another_tool_is_not_the_groups(
    catalog_config: CatalogConfig,
) -> None:
    """An atomic job's table dropped while the daemon runs, then created again by another tool: the daemon, which
    kept what it knew of the job's tables, neither audits the new one with the old checks nor publishes it with
    the group, and the group goes on without it, pass after pass."""
    config = catalog_config
    tables = ["db.a", "db.a b"]  # one name a prefix of the other
    for name in tables:
        create_orders_table(config, name)
    declare_publishing(config, "J", branches(tables), settings(), atomic=True)
    stream = BranchStream(config, tables, SAFE, job="J", atomic=True)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)  # one daemon, kept running
    stream.batch({t: orders(0, 1) for t in tables}, commit=False)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0], [0]]
    catalog = open_catalog(config)
    catalog.drop_table("db.a b")
    stream.tables = ["db.a"]
    stream.batch({"db.a": orders(1, 1)}, commit=False)
    daemon.run(once=True)
    assert ids_at(config, "db.a") == [0, 1]

    new_uuid = another_tools_table(config, "db.a b")  # with a branch of the name nobody audited
    for checkpoint in (2, 3):
        stream.batch({"db.a": orders(checkpoint, 1)}, commit=False)
        daemon.run(once=True)
        assert ids_at(config, "db.a") == list(range(checkpoint + 1)) and ids_at(config, "db.a b") == [100]
    assert AuditRecord(config).of_branch("db.a b", BRANCH, new_uuid) == {}


def test_a_running_stream_declares_again_what_the_daemon_forgot_while_the_name_was_missing(
    catalog_config: CatalogConfig,
) -> None:
    """An operator renames a table away and back (the same table): a daemon pass in between found no table of the
    name and forgot its declaration, so the running stream declares it again, and its rows go on being published."""
    from icesink.sink.branch_declarations import BranchDeclarations

    config = catalog_config
    create_orders_table(config, HOSTILE)
    stream = BranchStream(config, [HOSTILE], SAFE, job="J", atomic=False)
    declarations = BranchDeclarations(config, settings(), atomic=False)
    [branch] = branches([HOSTILE])
    declarations.met(branch.ref, branch)
    catalog = open_catalog(config)
    uuids = {HOSTILE: str(catalog.load_table(HOSTILE).metadata.table_uuid)}
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)
    declarations.take_over("J", uuids)
    stream.batch({HOSTILE: orders(0, 1)}, commit=False)
    daemon.run(once=True)
    catalog.rename_table(HOSTILE, "db.away")
    daemon.run(once=True)
    assert PublishingRecord(config).of_job("J") == []
    catalog.rename_table("db.away", HOSTILE)
    for checkpoint in (1, 2):
        declarations.take_over("J", uuids)  # each micro-batch, as the stream's handler does
        stream.batch({HOSTILE: orders(checkpoint, 1)}, commit=False)
        daemon.run(once=True)
    assert ids_at(config, HOSTILE) == [0, 1, 2]
