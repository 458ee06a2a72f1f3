"""A checkpoint that cannot commit stops neither its table's other checkpoints nor other tables, and an
operator can give it up (``checkpoints discard``) or have it tried again (``checkpoints retry``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.cli import main
from tests.helpers.support import create_orders_table, orders, stage_rows, staged_in_manifests, table_ids, wait_for

ROOT = Path(__file__).resolve().parent.parent
BROKEN = "shop.broken ü %/x"
FINE = "shop.fine"


def cli(config: CatalogConfig, *args: str) -> tuple[int, str, str]:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    result = CliRunner().invoke(main, [*base, *args])
    return result.exit_code, result.stdout, result.stderr


def daemon(config: CatalogConfig) -> subprocess.Popen[str]:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    command = [sys.executable, "-m", "icesink.cli", *base, "committer", "run", "--poll-interval", "0.1"]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def states(config: CatalogConfig, table: str) -> dict[int, str]:
    return {r.checkpoint_id: r.status for r in Ledger(config).for_table(table, unreadable_too=True)}


def lose_manifest(
    config: CatalogConfig, table: str, checkpoint: int, keep: Path | None = None, job: str = "job"
) -> Path:
    row = staged_in_manifests(config, table, job, checkpoint)  # as a release before staged it
    assert row.manifests.data is not None
    path = Path(row.manifests.data.path.removeprefix("file://"))
    if keep is not None:
        shutil.copy(path, keep)
    path.unlink()
    return path


def test_a_broken_checkpoint_holds_only_itself_and_discard_lets_the_later_ones_commit(
    catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    create_orders_table(catalog_config, BROKEN)
    create_orders_table(catalog_config, FINE)
    for checkpoint in range(5):
        stage_rows(catalog_config, BROKEN, "job", checkpoint, orders(checkpoint * 10, 10))
    lose_manifest(catalog_config, BROKEN, 2)
    process = daemon(catalog_config)
    try:
        for checkpoint in range(4):  # the other table keeps committing while the broken one fails
            stage_rows(catalog_config, FINE, "job", checkpoint, orders(checkpoint * 10, 10))
            wait_for(lambda c=checkpoint: states(catalog_config, FINE).get(c) == "committed", f"fine {checkpoint}")
        wait_for(lambda: states(catalog_config, BROKEN).get(2) == "failed", "the broken checkpoint to fail")
        assert process.poll() is None, process.communicate()
        assert table_ids(catalog_config, FINE) == list(range(40))
        # The checkpoints before the broken one are in; the ones after it wait, blamed for nothing.
        assert table_ids(catalog_config, BROKEN) == list(range(20))
        assert states(catalog_config, BROKEN) == {0: "committed", 1: "committed", 2: "failed", 3: "staged", 4: "staged"}
        broken = Ledger(catalog_config).get(BROKEN, "job", 2)
        assert broken is not None and broken.failed_at is not None and "cannot be read" in (broken.error or "")

        code, out, _ = cli(catalog_config, "checkpoints", "list", BROKEN)
        assert code == 0 and "failed (`icesink checkpoints retry`" in out and "checkpoint 2 of job job" in out

        # Without --yes: what would be lost, and nothing changes.
        code, out, _ = cli(catalog_config, "checkpoints", "discard", BROKEN, "2")
        assert code == 0, out
        assert "1 data file(s) with 10 row(s)" in out and "add --yes" in out
        assert states(catalog_config, BROKEN)[2] == "failed"

        code, out, err = cli(catalog_config, "checkpoints", "discard", BROKEN, "2", "--yes", "--reason", "lost a file")
        assert code == 0, err
        wait_for(lambda: table_ids(catalog_config, BROKEN) == [*range(20), *range(30, 50)], "the later checkpoints")
        assert process.poll() is None
    finally:
        process.terminate()
        process.wait(30)
    assert states(catalog_config, BROKEN) == {
        0: "committed",
        1: "committed",
        2: "discarded",
        3: "committed",
        4: "committed",
    }
    discarded = Ledger(catalog_config).get(BROKEN, "job", 2)
    assert discarded is not None and discarded.state == CheckpointState.DISCARDED
    assert discarded.discard_reason == "lost a file" and discarded.discarded_by and discarded.discarded_at
    # The snapshot that committed past it names it; the marker went on as usual.
    table = open_catalog(catalog_config).load_table(BROKEN)
    summary = table.current_snapshot().summary
    assert summary["icesink.discarded-checkpoints"] == "2"
    assert summary["icesink.max-committed-checkpoint-id"] == "4"
    assert discarded.snapshot_id == table.current_snapshot().snapshot_id
    # A committed or discarded checkpoint cannot be discarded (again).
    code, _, err = cli(catalog_config, "checkpoints", "discard", BROKEN, "3", "--yes")
    assert code == 2 and "is committed" in err and "Traceback" not in err
    code, _, err = cli(catalog_config, "checkpoints", "discard", BROKEN, "2", "--yes")
    assert code == 2 and "was discarded by" in err


def test_retry_commits_a_failed_checkpoint_once_its_cause_is_fixed(
    catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    create_orders_table(catalog_config, BROKEN)
    stage_rows(catalog_config, BROKEN, "job", 0, orders(0, 10))
    path = lose_manifest(catalog_config, BROKEN, 0, keep=tmp_path / "kept.avro")
    code, _, err = cli(catalog_config, "committer", "run", "--once")
    assert code == 2 and f"table {BROKEN}, job job, checkpoint 0" in err and "Traceback" not in err
    assert states(catalog_config, BROKEN) == {0: "failed"}
    code, _, err = cli(catalog_config, "checkpoints", "retry", BROKEN, "0")
    assert code == 0, err  # the cause is not fixed yet: it fails again on the next pass
    shutil.copy(tmp_path / "kept.avro", path)
    code, _, err = cli(catalog_config, "checkpoints", "retry", BROKEN, "0")
    assert code == 2 and "has not failed" in err  # the previous retry cleared its error already
    code, _, err = cli(catalog_config, "committer", "run", "--once")
    assert code == 0, err
    assert table_ids(catalog_config, BROKEN) == list(range(10))
    assert states(catalog_config, BROKEN) == {0: "committed"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["checkpoints", "discard", BROKEN, "7", "--yes"], f"table {BROKEN} has no checkpoint 7"),
        (["checkpoints", "discard", "shop.nope", "0", "--yes"], "shop.nope"),
        (["checkpoints", "retry", BROKEN, "0"], "has not failed"),
        (["checkpoints", "discard", BROKEN, "-1"], "-1"),
    ],
)
def test_operator_mistakes_get_one_line_and_change_nothing(
    sqlite_catalog: CatalogConfig, args: list[str], message: str
) -> None:
    create_orders_table(sqlite_catalog, BROKEN)
    stage_rows(sqlite_catalog, BROKEN, "job", 0, orders(0, 10))
    code, _, err = cli(sqlite_catalog, *args)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert states(sqlite_catalog, BROKEN) == {0: "staged"}


def test_two_jobs_with_the_same_checkpoint_need_job(sqlite_catalog: CatalogConfig) -> None:
    create_orders_table(sqlite_catalog, BROKEN)
    stage_rows(sqlite_catalog, BROKEN, "job-a", 0, orders(0, 10))
    stage_rows(sqlite_catalog, BROKEN, "job-b", 0, orders(10, 10))
    code, _, err = cli(sqlite_catalog, "checkpoints", "discard", BROKEN, "0", "--yes")
    assert code == 2 and "several jobs (job-a, job-b); name one with --job" in err
    code, out, err = cli(sqlite_catalog, "checkpoints", "discard", BROKEN, "0", "--job", "job-b", "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["checkpoint"]["status"] == "discarded"
    code, _, err = cli(sqlite_catalog, "committer", "run", "--once")
    assert code == 0, err
    assert table_ids(sqlite_catalog, BROKEN) == list(range(10))


def test_gc_cleans_every_other_table_while_one_has_a_broken_checkpoint_and_that_one_after_discard(
    sqlite_catalog: CatalogConfig,
) -> None:
    from tests.helpers.support import age_everything

    create_orders_table(sqlite_catalog, BROKEN)
    create_orders_table(sqlite_catalog, FINE)
    for table in (BROKEN, FINE):
        stage_rows(sqlite_catalog, table, "job", 0, orders(0, 10))
    lose_manifest(sqlite_catalog, BROKEN, 0)
    warehouse = Path(sqlite_catalog.warehouse.removeprefix("file://"))
    orphan = warehouse / "shop" / "fine" / "data" / "orphan.parquet"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left by a killed task")
    age_everything(warehouse)
    code, out, err = cli(sqlite_catalog, "committer", "gc", "--older-than", "1h", "--json")
    assert code == 2 and f"table {BROKEN}, job job, checkpoint 0" in err, err
    assert [r["table"] for r in json.loads(out)] == [FINE] and not orphan.exists()
    # Given up, the checkpoint's data file is garbage like any other.
    assert cli(sqlite_catalog, "checkpoints", "discard", BROKEN, "0", "--yes")[0] == 0
    age_everything(warehouse)
    code, out, err = cli(sqlite_catalog, "committer", "gc", "--older-than", "1h", "--json")
    assert code == 0, err
    (broken,) = [r for r in json.loads(out) if r["table"] == BROKEN]
    assert any(path.endswith(".parquet") for path in broken["deleted"]), broken


def test_an_unreadable_ledger_row_is_listed_holds_its_table_and_can_be_discarded(catalog_config: CatalogConfig) -> None:
    """A damaged row (or one a later release wrote) is never committed or taken for garbage; the operator sees
    it and can give it up, and the checkpoints after it then commit."""
    import sqlalchemy as sa

    from icesink.catalog.database import engine
    from icesink.catalog.ledger import checkpoints

    create_orders_table(catalog_config, BROKEN)
    create_orders_table(catalog_config, FINE)
    for checkpoint in range(2):
        stage_rows(catalog_config, BROKEN, "job", checkpoint, orders(checkpoint * 10, 10))
    stage_rows(catalog_config, FINE, "job", 0, orders(0, 10))
    with engine(catalog_config).begin() as connection:
        connection.execute(
            sa.update(checkpoints)
            .where(checkpoints.c.table_identifier == BROKEN, checkpoints.c.checkpoint_id == 0)
            .values(delta_manifests="{not json")
        )
    code, out, err = cli(catalog_config, "checkpoints", "list", BROKEN, "--json")
    assert code == 0, err
    assert [(c["checkpoint_id"], c["status"]) for c in json.loads(out)["checkpoints"]] == [
        (0, "unreadable"),
        (1, "staged"),
    ]
    code, out, _ = cli(catalog_config, "checkpoints", "list", BROKEN)
    assert "unreadable (as each says" in out and "restore the ledger row from a backup" in out, out
    # The committer commits the other table and holds this one at the unreadable row; gc deletes nothing of it.
    code, _, err = cli(catalog_config, "committer", "run", "--once")
    assert code == 2 and f"checkpoint 0 of job 'job' for table {BROKEN!r} cannot be read" in err, err
    assert table_ids(catalog_config, FINE) == list(range(10)) and table_ids(catalog_config, BROKEN) == []
    code, _, err = cli(catalog_config, "committer", "gc", "--table", BROKEN, "--older-than", "1h")
    assert code == 2 and "gc deletes nothing in this table meanwhile" in err, err
    code, out, _ = cli(catalog_config, "checkpoints", "discard", BROKEN, "0")
    assert code == 0 and "whatever it staged would never reach the table" in out, out
    code, out, err = cli(catalog_config, "checkpoints", "discard", BROKEN, "0", "--yes")
    assert code == 0 and "an unknown number of row(s) lost" in out, (out, err)
    assert cli(catalog_config, "committer", "run", "--once")[0] == 0
    assert table_ids(catalog_config, BROKEN) == list(range(10, 20))
    assert states(catalog_config, BROKEN) == {0: "discarded", 1: "committed"}
    summary = open_catalog(catalog_config).load_table(BROKEN).current_snapshot().summary  # type: ignore[union-attr]
    assert summary["icesink.discarded-checkpoints"] == "0"
    assert cli(catalog_config, "committer", "gc", "--table", BROKEN, "--older-than", "1h")[0] == 0


def _damage(config: CatalogConfig, table: str, checkpoint: int, value: str) -> None:
    import sqlalchemy as sa

    from icesink.catalog.database import engine
    from icesink.catalog.ledger import checkpoints

    with engine(config).begin() as connection:
        connection.execute(
            sa.update(checkpoints)
            .where(checkpoints.c.table_identifier == table, checkpoints.c.checkpoint_id == checkpoint)
            .values(delta_manifests=value)
        )


def test_an_unreadable_row_of_a_group_is_named_by_the_tables_it_holds_back(sqlite_catalog: CatalogConfig) -> None:
    from tests.helpers.support import stage_group

    config, other = sqlite_catalog, "shop.other"
    create_orders_table(config, BROKEN)
    create_orders_table(config, other)
    for checkpoint in range(2):
        stage_group(config, "job", checkpoint, {t: orders(checkpoint * 10, 10) for t in (BROKEN, other)})
    _damage(config, BROKEN, 1, "[" * 100_000)  # nested past the JSON reader's depth
    code, out, err = cli(config, "checkpoints", "list", BROKEN)
    assert code == 0 and "unreadable (as each says" in out and "nested too deeply" in out, (out, err)
    code, out, err = cli(config, "checkpoints", "list", other)
    assert code == 0 and f"waits for checkpoint 1 of table {BROKEN}" in out, (out, err)
    code, _, err = cli(config, "checkpoints", "retry", BROKEN, "1")
    assert code == 2 and "cannot be tried again as it is" in err and "Traceback" not in err, err
    # The committer commits nothing of the group while one of its rows cannot be read (not even the checkpoint
    # before it: the group's rows are read as one), and says which row.
    code, _, err = cli(config, "committer", "run", "--once")
    assert code == 2 and f"checkpoint 1 of job 'job' for table {BROKEN!r} cannot be read" in err, err
    assert table_ids(config, other) == []
    assert cli(config, "checkpoints", "discard", BROKEN, "1", "--yes")[0] == 0
    # A stream replaying the given-up micro-batch writes nothing again.
    assert not stage_rows(config, BROKEN, "job", 1, orders(10, 10))
    assert cli(config, "committer", "run", "--once")[0] == 0
    assert table_ids(config, BROKEN) == list(range(10)) and table_ids(config, other) == list(range(20))


def test_checkpoints_staged_for_a_table_dropped_and_created_again_are_not_committed_into_the_new_one(
    catalog_config: CatalogConfig,
) -> None:
    """Another tool drops the table and creates it again under the same name while two checkpoints wait: they were
    written for the old table, so neither lands in the new one; the error names both uuids and a discard command
    a shell takes as it is; once they are given up, what was staged for the new table commits."""
    import shlex

    from icesink.committer.commit import TableCommitter

    create_orders_table(catalog_config, BROKEN)
    stage_rows(catalog_config, BROKEN, "job", 0, orders(0, 10))
    committer = TableCommitter.of(catalog_config)  # keeps its view of the table, as a stream's committer does
    committer.commit_pending(BROKEN)
    stage_rows(catalog_config, BROKEN, "job", 1, orders(10, 10))
    stage_rows(catalog_config, BROKEN, "job", 2, orders(20, 10))
    old = str(open_catalog(catalog_config).load_table(BROKEN).metadata.table_uuid)
    open_catalog(catalog_config).drop_table(BROKEN)
    new = str(create_orders_table(catalog_config, BROKEN).metadata.table_uuid)
    stage_rows(catalog_config, BROKEN, "job", 3, orders(30, 10))  # written for the new table
    code, _, err = cli(catalog_config, "committer", "run", "--once")
    assert code == 2 and "Traceback" not in err, err
    assert f"table {BROKEN}, job job, checkpoint 1" in err and old in err and new in err
    assert table_ids(catalog_config, BROKEN) == []  # nothing reached the new table
    assert states(catalog_config, BROKEN) == {0: "committed", 1: "failed", 2: "staged", 3: "staged"}
    for checkpoint in (1, 2):
        command = f"icesink checkpoints discard --job job --yes {shlex.quote(BROKEN)} {checkpoint}"
        if checkpoint == 1:
            assert command in err
        code, _, err = cli(catalog_config, *shlex.split(command)[1:])
        assert code == 0, err
    committer.commit_pending(BROKEN)  # the committer that knew the old table commits into the new one
    assert table_ids(catalog_config, BROKEN) == list(range(30, 40))
    assert states(catalog_config, BROKEN)[3] == "committed"


def test_a_committer_that_knew_the_old_table_commits_what_was_staged_for_the_new_one(
    sqlite_catalog: CatalogConfig,
) -> None:
    """The committer's view of the table, kept from its last commit, is of the table that was dropped: the next
    checkpoint, staged for the new table, is judged on the table as the catalog has it now, and commits."""
    from icesink.committer.commit import TableCommitter

    create_orders_table(sqlite_catalog, BROKEN)
    stage_rows(sqlite_catalog, BROKEN, "job", 0, orders(0, 10))
    committer = TableCommitter.of(sqlite_catalog)
    committer.commit_pending(BROKEN)
    open_catalog(sqlite_catalog).drop_table(BROKEN)
    create_orders_table(sqlite_catalog, BROKEN)
    stage_rows(sqlite_catalog, BROKEN, "job", 1, orders(10, 10))
    committer.commit_pending(BROKEN)
    assert table_ids(sqlite_catalog, BROKEN) == list(range(10, 20))
    assert states(sqlite_catalog, BROKEN) == {0: "committed", 1: "committed"}


def test_commands_the_messages_print_run_as_printed_for_a_name_starting_with_a_dash(
    sqlite_catalog: CatalogConfig,
) -> None:
    """Every value is quoted for a shell and the names come after ``--``: ``-odd`` is a name, not an option."""
    import re
    import shlex

    from icesink.commands import icesink_command

    hostile = "-odd.-or'ders ü"
    create_orders_table(sqlite_catalog, hostile)
    stage_rows(sqlite_catalog, hostile, "-job", 0, orders(0, 10))
    code, _, err = cli(sqlite_catalog, "checkpoints", "discard", "--yes", "--", hostile, "7")
    assert code == 2 and "no checkpoint 7" in err, err
    shown = re.findall(r"`(icesink [^`]+)`", err)
    assert shown == [icesink_command("checkpoints list", hostile)] and " -- " in shown[0]
    code, out, err = cli(sqlite_catalog, *shlex.split(shown[0])[1:])
    assert code == 0 and "-job" in out, err
    # The staged manifest lost: the retry and discard commands the committer prints, run as printed.
    lose_manifest(sqlite_catalog, hostile, 0, job="-job")
    code, _, err = cli(sqlite_catalog, "committer", "run", "--once")
    assert code == 2 and "cannot be read" in err, err
    retry, discard = re.findall(r"`(icesink checkpoints [^`]+)`", err)
    code, _, err = cli(sqlite_catalog, *shlex.split(retry)[1:])
    assert code == 0 and states(sqlite_catalog, hostile) == {0: "staged"}, err  # sent back to be committed
    code, _, err = cli(sqlite_catalog, *shlex.split(discard)[1:])
    assert code == 0, err
    assert states(sqlite_catalog, hostile) == {0: "discarded"}
