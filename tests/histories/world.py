"""The real system under test and the model it must equal.

The world drives icesink the way Spark would (the task writer on Arrow rows
under the table's current names, staging, the committer), plus what other
tools and operators do (schema changes through pyiceberg, maintenance, a
committer killed at a failpoint, a lost manifest and a discard). The model
keeps each table's rows by field id, so that renames cannot fool it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from icesink.audit.publish_policy import PublishSettings
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.commit import TableCommitter
from icesink.committer.publisher import Publisher
from icesink.properties import EVENT_TIME_FIELD_PROPERTY, MAINTENANCE_PROPERTY
from icesink.sink.event_time import EventTimeSettings
from icesink.sink.stream_watermark import StreamWatermark, TableTimes
from icesink.table_ref import MAIN_BRANCH, TableRef
from icesink.writer.spec import EventTimeSpec
from tests.histories.branches import BRANCH, CURE, POISON, no_poison_left
from tests.histories.canon import by_id, by_name, canon, drop_id, widen_id
from tests.histories.grammar import TableShape, input_type, random_primitive, random_value
from tests.histories.group import COMPANION

IDENTIFIER = "hist.table ü %/x"
JOB = "job"
ROOT = Path(__file__).resolve().parents[2]
FAILPOINTS = (
    "committer.before-catalog-commit",
    "committer.after-catalog-commit",
    "committer.after-ledger-update",
    "committer.during-cleanup",
)


class Mismatch(AssertionError):
    """The table (or what a reader makes of it) differs from the model."""


Row = dict[int, Any]  # field id -> canonical value


@dataclass
class Model:
    """What the table must hold: rows by key (keyed tables) or a list (appends), values canonical by field id."""

    keyed: bool
    rows: dict[Any, Row] = field(default_factory=dict)
    appended: list[Row] = field(default_factory=list)

    def all_rows(self) -> list[Row]:
        return list(self.rows.values()) if self.keyed else list(self.appended)

    def change_values(self, change: Callable[[Row], Row]) -> None:
        """Apply ``change`` to every row (a field dropped or widened by another tool)."""
        self.rows = {key: change(row) for key, row in self.rows.items()}
        self.appended = [change(row) for row in self.appended]


class World:
    """One table in a fresh catalog, written and changed as a history says."""

    def __init__(self, config: CatalogConfig, shape: TableShape, atomic: bool = False, branch: bool = False) -> None:
        from icesink.sink.tables import parse_partition_by
        from tests.histories.group import GROUP_FAILPOINTS, Companion

        self.config = config
        self.catalog = open_catalog(config, pending_tables=True)  # the companion is pending until it commits
        self.catalog.create_namespace_if_not_exists("hist")
        partition = (shape.partition,) if shape.partition else ()
        spec = parse_partition_by(IDENTIFIER, shape.schema, partition)
        table = self.catalog.create_table(IDENTIFIER, schema=shape.schema, partition_spec=spec)
        schema = table.schema()
        self.key_ids = tuple(schema.find_field(k).field_id for k in shape.keys)
        self.partition_source_ids = {f.source_id for f in table.spec().fields}
        if self.key_ids:
            with table.update_schema() as update:  # readers such as the changelog take the key from here
                update.set_identifier_fields(*shape.keys)
        self.model = Model(keyed=bool(self.key_ids))
        # With ``branch``, checkpoints commit to tests.histories.branches.BRANCH and main follows once audited:
        # ``model`` is the branch's, ``published`` main's (see tests/histories/branches.py).
        self.branch = BRANCH if branch else MAIN_BRANCH
        self.published = Model(keyed=bool(self.key_ids))
        self.poisoned = False  # a poisoned checkpoint is on the branch, not cured yet: main holds
        self.flags: dict[str, str] = {}  # what the next checkpoint's snapshot says (poison, cure)
        # With ``atomic``, a second table is written in every checkpoint and committed with this one.
        self.companion = Companion(self.catalog, config) if atomic else None
        self.failpoints = GROUP_FAILPOINTS if atomic else FAILPOINTS
        self.next_checkpoint = 0
        self.committer = TableCommitter(self.catalog, config, Ledger(config))
        self.publisher = self._publisher() if branch else None
        self.last_marker = -1
        self.readers_asked: Counter[str] = Counter()
        self.maintenance_made: Counter[str] = Counter()  # the snapshots maintenance made, by kind
        # Names dropped or renamed away, by struct: a new field may take one again (the name-reuse trap:
        # files of the old field hold that name with another field id).
        self.retired: dict[tuple[str, ...], list[str]] = {}
        self.notes: list[str] = []  # what the schema changes did, for a failure's report
        # The first top-level date or timestamp column is the stream's event time: the watermark is kept as a
        # stream's driver keeps it, and must never go back, whatever the history does to the table.
        times = [f for f in schema.fields if str(f.field_type) in ("date", "timestamp", "timestamptz")]
        self.event_field = times[0].field_id if times else None
        self.clock_ms = 0
        self.watermark = StreamWatermark(Ledger(config), 60_000_000, clock=lambda: self.clock_ms / 1000)
        self.last_watermark: int | None = None
        self.late_rows: dict[int, int] = {}  # checkpoint -> its rows below the watermark it started with, as staged

    def table(self) -> Any:
        return self.catalog.load_table(IDENTIFIER)

    def _publisher(self) -> Publisher:
        from icesink import checks

        settings = PublishSettings.of(None, True, "continue", IDENTIFIER)
        audited = AuditedBranch(TableRef(IDENTIFIER, self.branch), (no_poison_left, checks.rows_written()))
        committer = self.committer
        return Publisher(
            self.catalog,
            self.config,
            Ledger(self.config),
            [audited],
            settings,
            False,
            committer.forget,
        )

    # --- writing, as a stream's tasks and driver do --------------------------------------------------------------

    def changes(self, rng: random.Random, size: int) -> tuple[pa.Table, list[str]]:
        """Random rows under the table's current names; for keyed tables, keys from few values and some deletes."""
        schema = self.table().schema()
        rows, ops = [], []
        for _ in range(size):
            row = {f.name: random_value(rng, f.field_type, f.required) for f in schema.fields}
            for key_id in self.key_ids:
                self._set_key(schema, row, key_id, rng)
            rows.append(row)
            ops.append(rng.choices(("I", "U", "D"), weights=(4, 4, 2))[0] if self.key_ids else "I")
        arrow = pa.schema([pa.field(f.name, input_type(f.field_type)) for f in schema.fields])
        return pa.Table.from_pylist(rows, schema=arrow), ops

    def _set_key(self, schema: Any, row: dict[str, Any], key_id: int, rng: random.Random) -> None:
        from icesink.iceberg.schemas import field_path

        path = [name for _, name in field_path(schema, key_id)]
        value = random_primitive(rng, str(schema.find_field(key_id).field_type), small=True)
        target = row
        for name in path[:-1]:  # a key inside structs: the structs are required, so they hold a value
            if target.get(name) is None:
                target[name] = {}
            target = target[name]
        target[path[-1]] = value

    def write(self, rows: pa.Table, ops: list[str], again: int | None = None) -> tuple[int, bool]:
        """Files for the next checkpoint (or, as Spark re-delivers one, for checkpoint ``again`` by a new
        task attempt), staged, not committed; returns the checkpoint id and whether staging took it."""
        from icesink.committer.staging import TableResults, stage_tables
        from icesink.iceberg.describe import writer_spec
        from icesink.writer.spec import ChangeSpec
        from icesink.writer.task import TaskWriter

        table = self.table()
        checkpoint = self.next_checkpoint if again is None else again
        if again is None:
            self.next_checkpoint += 1
        changes = None
        if self.key_ids:
            changes = ChangeSpec(self.key_ids, op_column="op")
            rows = rows.append_column("op", pa.array(ops, pa.string()))
            rows = rows.append_column("__icesink_order", pa.array(range(rows.num_rows), pa.int64()))
        spec = writer_spec(table, IDENTIFIER, JOB, changes).for_checkpoint(checkpoint)
        event_time = self._event_time(table)
        late_before = None
        if event_time is not None:
            self.clock_ms += 20_000
            late_before = self.watermark.start(JOB, checkpoint, [(table, TableRef(IDENTIFIER, self.branch))])
            spec = replace(spec, event_time=EventTimeSpec(event_time.column, (SPLIT_COLUMN,), late_before))
            rows = rows.append_column(SPLIT_COLUMN, _splits(checkpoint, rows.num_rows))
        attempt = 0 if again is None else 1
        writer = TaskWriter(spec, task_id=0, attempt=attempt)
        writer.write(rows)
        result = writer.complete()
        state, properties = None, {}
        late = _rows_below(rows, event_time.column, late_before) if event_time is not None else 0
        if event_time is not None:
            state, shared, counts = self.watermark.fold([TableTimes(IDENTIFIER, event_time, [result])])
            properties = {**shared, **counts[IDENTIFIER], EVENT_TIME_FIELD_PROPERTY: str(self.event_field)}
        properties = {**properties, **self.flags}
        written = [TableResults(table, IDENTIFIER, [result], snapshot_properties=properties, branch=self.branch)]
        if self.companion is None:
            staged = stage_tables(Ledger(self.config), JOB, checkpoint, written)
            if staged and state is not None:
                self._staged(checkpoint, state, late)
            return checkpoint, staged
        companion = self.catalog.load_table(COMPANION)
        written.append(self.companion.results(companion, JOB, checkpoint, rows.num_rows, attempt))
        staged = stage_tables(Ledger(self.config), JOB, checkpoint, written, atomic=True)
        if staged:
            self.companion.expected[checkpoint] = rows.num_rows
            if state is not None:
                self._staged(checkpoint, state, late)
        return checkpoint, staged

    def _staged(self, checkpoint: int, state: Any, late: int) -> None:
        self.watermark.staged(checkpoint, state)
        self.late_rows[checkpoint] = late

    def _event_time(self, table: Any) -> EventTimeSettings | None:
        """The event-time column as the rows name it now (another tool may have renamed or dropped it)."""
        if self.event_field is None:
            return None
        try:
            name = table.schema().find_field(self.event_field).name
        except ValueError:
            return None
        return EventTimeSettings(name, 0, (SPLIT_COLUMN,))

    def stage(self, rows: pa.Table, ops: list[str]) -> int:
        """The next checkpoint written and staged, left for a committer; returns its id."""
        checkpoint, staged = self.write(rows, ops)
        assert staged
        return checkpoint

    def write_and_commit(self, rows: pa.Table, ops: list[str], expire: bool = False) -> None:
        self.stage(rows, ops)
        self.commit(expire)

    def replay(self, rng: random.Random) -> None:
        """Spark re-delivers the last checkpoint after a crash: staging keeps the first, nothing is written twice."""
        if self.next_checkpoint == 0:
            return
        rows, ops = self.changes(rng, 3)
        checkpoint, staged = self.write(rows, ops, again=self.next_checkpoint - 1)
        if staged:
            raise Mismatch(f"checkpoint {checkpoint} was staged a second time")
        self.commit()

    def evolve(self, rng: random.Random, size: int) -> None:
        """A stream's input gains a column (only a stream can do this: see SparkWorld); here, a plain write."""
        rows, ops = self.changes(rng, size)
        self.write_and_commit(rows, ops)
        self.apply_to_model(rows, ops)

    def commit(self, expire: bool = False) -> None:
        committer = self.committer
        if expire:
            committer = TableCommitter(self.catalog, self.config, Ledger(self.config), expire_snapshots=True)
        if self.companion is None:
            committer.commit_pending(IDENTIFIER)
        else:  # as the inline committer of a stream of several tables does
            committer.commit_atomic(JOB)
        self.committer.forget(IDENTIFIER)
        self.committer.forget(COMPANION)
        if self.publisher is not None:  # as the inline committer of a stream with audits does, after its commit
            self.publisher.after_commit(JOB)

    def apply_to_model(self, rows: pa.Table, ops: list[str]) -> None:
        """What the checkpoint must do: the last change of each key wins (by input order)."""
        schema = self.table().schema()
        model_rows = [
            {f.field_id: by_id(f.field_type, row.get(f.name)) for f in schema.fields} for row in rows.to_pylist()
        ]
        if not self.key_ids:
            self.model.appended.extend(model_rows)
            self.checkpoint_done()
            return
        latest: dict[Any, tuple[str, Row]] = {}
        for row, op, raw in zip(model_rows, ops, rows.to_pylist(), strict=True):
            latest[self.key_of(schema, raw)] = (op, row)
        for key, (op, row) in latest.items():
            if op == "D":
                self.model.rows.pop(key, None)
            else:
                self.model.rows[key] = row
        self.checkpoint_done()

    def checkpoint_done(self) -> None:
        """A checkpoint is in the model of the branch: main takes it, unless a poison is on the branch, uncured."""
        self.poisoned = (self.poisoned or POISON in self.flags) and CURE not in self.flags
        self.flags = {}
        if self.branch != MAIN_BRANCH and not self.poisoned:
            self.published = Model(self.model.keyed, dict(self.model.rows), list(self.model.appended))

    def key_of(self, schema: Any, raw: dict[str, Any]) -> tuple[Any, ...]:
        from icesink.iceberg.schemas import field_path

        key = []
        for key_id in self.key_ids:
            value: Any = raw
            for _, name in field_path(schema, key_id):
                value = value[name]
            key.append(canon(schema.find_field(key_id).field_type, value))
        return tuple(key)

    # --- what other processes do ---------------------------------------------------------------------------------

    def crash_commit(self, failpoint: str) -> None:
        """``icesink committer run --once`` killed at ``failpoint``; the next committer finishes the job."""
        base = ["--catalog", self.config.name, "--uri", self.config.uri, "--warehouse", self.config.warehouse]
        env = {**os.environ, "ICESINK_FAILPOINTS": failpoint}
        done = subprocess.run(
            # A committer killed before holds its lease until it expires: wait for it, as a restarted one would.
            [sys.executable, "-m", "icesink.cli", *base, "committer", "run", "--once", "--wait", "60"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        # Every failpoint is on the way of a commit that has a checkpoint to commit: the process must die there.
        assert done.returncode == -9, f"the committer was not killed at {failpoint}: {done.stderr[-2000:]}"
        if self.companion is not None:  # what the killed committer left: both tables at one cut, or neither
            self.companion.check_cut(self.config, IDENTIFIER, JOB)
        self.committer = TableCommitter.of(self.config)  # a new process' committer
        if self.publisher is not None:
            self.publisher = self._publisher()  # and its publisher, knowing only what the catalog holds
        self.commit()

    def lose_and_discard(self, checkpoint: int) -> None:
        """A checkpoint staged by a release before (in delta manifest files, as an upgrade finds it) loses its
        manifest; committing fails for it alone; an operator discards it."""
        from icesink.committer.operator import choose_checkpoint, discard
        from icesink.errors import ManifestError
        from tests.helpers.support import staged_in_manifests

        ledger = Ledger(self.config)
        row = staged_in_manifests(self.config, IDENTIFIER, JOB, checkpoint)
        for path in row.manifest_paths:
            Path(path.removeprefix("file://")).unlink()
        try:
            self.commit()
        except ManifestError:
            pass
        else:
            raise Mismatch(f"checkpoint {checkpoint} committed without its manifest")
        discard(ledger, self.table(), choose_checkpoint(ledger, IDENTIFIER, checkpoint, JOB), "history", "lost")
        if self.companion is not None:  # the companion's part of it commits without the discarded one
            self.companion.discarded.add(checkpoint)
        self.commit()

    def alter(self, rng: random.Random) -> str:
        """Another tool changes the schema through pyiceberg, at any depth; returns what it did."""
        from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType, StructType

        table = self.table()
        schema = table.schema()
        protected = (
            set(self.key_ids) | self.partition_source_ids | {p for k in self.key_ids for p in _parents(schema, k)}
        )
        every = list(_struct_members(schema))
        members = [(path, f, n) for path, f, n in every if f.field_id not in protected]
        structs = [()] + [path for path, f, _ in every if isinstance(f.field_type, StructType)]
        # Never the last member of a struct: Parquet has no empty group.
        droppable = [(path, f, n) for path, f, n in members if n > 1]
        widen = [m for m in members if isinstance(m[1].field_type, IntegerType | FloatType | DecimalType)]
        choices = ["add"] + (["rename", "optional"] if members else []) + (["drop"] if droppable else [])
        kind = rng.choice(choices + (["widen"] if widen else []))
        with table.update_schema() as update:
            if kind == "add":
                parent = rng.choice(structs)
                name = _fresh_name(schema, parent, rng, self.retired.get(parent, []))
                update.add_column((*parent, name), LongType())  # a tuple: a dot in a name is no path
                return f"add column {(*parent, name)}"
            path, target, _ = rng.choice({"drop": droppable, "widen": widen}.get(kind, members))
            if kind == "rename":
                name = _fresh_name(schema, path[:-1], rng, self.retired.get(path[:-1], []))
                update.rename_column(path, name)
                self.retired.setdefault(path[:-1], []).append(path[-1])
                return f"rename {path} to {name!r}"
            if kind == "drop":
                update.delete_column(path)
                self.retired.setdefault(path[:-1], []).append(path[-1])
                self._change_values(lambda row: drop_id(row, target.field_id))
                return f"drop {path}"
            if kind == "optional":
                update.update_column(path, required=False)
                return f"make {path} optional"
            kind_now = target.field_type
            wider: Any = (
                LongType()
                if isinstance(kind_now, IntegerType)
                else DoubleType()
                if isinstance(kind_now, FloatType)
                else DecimalType(min(38, kind_now.precision + 4), kind_now.scale)
            )
            update.update_column(path, field_type=wider)
            self._change_values(lambda row: widen_id(row, target.field_id, wider))
            return f"widen {path} to {wider}"

    def tune_maintenance(self, rng: random.Random, merge_only: bool = False) -> str:
        """Maintenance thresholds set as another tool would: each choice of rewrite, merge and tier gets its turn
        (``merge_only``: none that rewrites a file, so deletes are merged)."""
        settings = {
            # Small tables: mostly nothing small and few rewrites for deletes, so that deletes get merged.
            "icesink.maintain.delete-ratio-threshold": rng.choice(["0", "0.05", "0.3", "1", "1"]),
            "icesink.maintain.delete-file-threshold": rng.choice(["3", "20", "20"]),
            "icesink.maintain.min-file-ratio": rng.choice(["0", "0", "0", "0.75", "1"]),
            "icesink.maintain.min-input-files": rng.choice(["2", "5"]),
            "icesink.maintain.min-commits": rng.choice(["1", "1", "10"]),
        }
        if merge_only:
            settings = {
                "icesink.maintain.delete-ratio-threshold": "1",
                "icesink.maintain.delete-file-threshold": "1000",
                "icesink.maintain.min-file-ratio": "0",
                "icesink.maintain.min-commits": "1",
            }
        with self.table().transaction() as change:
            change.set_properties(settings)
        return "maintenance settings " + ", ".join(f"{k.rsplit('.', 1)[1]}={v}" for k, v in settings.items())

    def maintain(self, mode: str) -> None:
        from icesink.maintenance.committing import MaintenanceTarget
        from icesink.maintenance.policy import MaintenancePolicy
        from icesink.maintenance.run import MaintenanceRequest, maintain_table

        # A stream into a branch is maintained on its branch, so that main can still follow it (and does, at once).
        target = MaintenanceTarget(self.catalog, self.config, IDENTIFIER, branch=self.branch)
        policy = MaintenancePolicy.of(self.table().properties, IDENTIFIER)
        before = {s.snapshot_id for s in self.table().snapshots()}
        if mode == "convert":
            from icesink.maintenance.convert import convert_equality_deletes

            convert_equality_deletes(target, self.table())
        else:
            maintain_table(target, self.table(), MaintenanceRequest(policy, everything=mode == "all"))
        for snapshot in self.table().snapshots():
            if snapshot.snapshot_id not in before and snapshot.summary is not None:
                self.maintenance_made[snapshot.summary.get(MAINTENANCE_PROPERTY) or "other"] += 1
        self.committer.forget(IDENTIFIER)
        if self.publisher is not None:
            self.publisher.after_commit(JOB)

    # --- the oracle ----------------------------------------------------------------------------------------------

    def _change_values(self, change: Callable[[Row], Row]) -> None:
        """Another tool changed the schema: every reader of the table reads it so, main's and the branch's."""
        self.model.change_values(change)
        self.published.change_values(change)

    def expected(self, branch: str = MAIN_BRANCH) -> tuple[Any, list[dict[str, Any]]]:
        """The model's rows of ``branch`` under the table's current names, canonical."""
        from tests.histories.canon import canon_rows

        model = self.published if self.branch != MAIN_BRANCH and branch == MAIN_BRANCH else self.model
        schema = self.table().schema()
        rows = [{f.name: by_name(f.field_type, row.get(f.field_id)) for f in schema.fields} for row in model.all_rows()]
        return schema, canon_rows(schema, rows)

    def check_reader(self, reader: str, rows: list[dict[str, Any]], branch: str = MAIN_BRANCH) -> None:
        from tests.histories.canon import canon_rows, first_difference

        schema, expected = self.expected(branch)
        self.readers_asked[reader] += 1
        names = {f.name for f in schema.fields}
        if rows and set(rows[0]) != names:
            raise Mismatch(f"{reader} gives columns {sorted(rows[0])}, the table has {sorted(names)}")
        problem = first_difference(canon_rows(schema, rows), expected, reader)
        if problem:
            raise Mismatch(problem)

    def check_invariants(self) -> None:
        """No checkpoint in two snapshots, the marker never back, no manifest naming a missing file; with a
        companion table, the same of it, its rows, and both tables at one cut."""
        self.last_marker = self._check_table(IDENTIFIER, self.last_marker)
        if self.companion is not None:
            self.companion.last_marker = self._check_table(COMPANION, self.companion.last_marker)
            self.companion.check(self.config, IDENTIFIER, JOB)

    def _check_table(self, identifier: str, last_marker: int) -> int:
        """The invariants of one table; returns its marker now."""
        from icesink.iceberg.marker import committed_marker
        from icesink.properties import CHECKPOINT_RANGE_PROPERTY, JOB_ID_PROPERTY, MAINTENANCE_PROPERTY

        table = self.catalog.load_table(identifier)
        seen: dict[int, int] = {}
        for snapshot in table.snapshots():
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            span = summary.get(CHECKPOINT_RANGE_PROPERTY)
            if span is None:
                if JOB_ID_PROPERTY in summary and MAINTENANCE_PROPERTY not in summary:
                    raise Mismatch(
                        f"snapshot {snapshot.snapshot_id} of job {summary[JOB_ID_PROPERTY]} names no checkpoints"
                    )
                continue
            first, _, last = span.partition("-")
            for checkpoint in range(int(first), int(last or first) + 1):
                if checkpoint in seen:
                    raise Mismatch(
                        f"checkpoint {checkpoint} is in snapshots {seen[checkpoint]} and {snapshot.snapshot_id}"
                    )
                seen[checkpoint] = snapshot.snapshot_id
        marker = committed_marker(table.metadata, JOB, self.branch if identifier == IDENTIFIER else MAIN_BRANCH)
        now = marker.checkpoint_id if marker else -1
        if now < last_marker:
            raise Mismatch(f"table {identifier}: the marker went back from {last_marker} to {now}")
        if identifier == IDENTIFIER:
            self._check_watermark(table)
        needed = {_local(path) for path in self.referenced_files(identifier)}
        missing = sorted(path for path in needed if not Path(path).exists())
        if missing:
            raise Mismatch(f"table {identifier}'s metadata names {len(missing)} missing file(s), e.g. {missing[0]}")
        garbage = self.collect_garbage(dry_run=True, identifier=identifier)
        wrong = sorted(uri for uri in garbage if _local(uri) in needed)
        if wrong:
            raise Mismatch(f"committer gc --dry-run lists {len(wrong)} referenced file(s), e.g. {wrong[0]}")
        return now

    def _check_watermark(self, table: Any) -> None:
        """The watermark along main never goes back, nor between two looks; a partition is done no earlier than
        the watermark reaching its end."""
        from icesink.completeness.partition_times import parse_partition_path
        from icesink.completeness.watermark import parse_watermark
        from icesink.iceberg.watermarks import recorded_watermark
        from icesink.properties import PARTITIONS_DONE_PROPERTY, WATERMARK_PROPERTY
        from icesink.readiness import partition_end

        by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
        snapshot, seen = table.metadata.snapshot_by_name(self.branch), []
        while snapshot is not None:
            seen.append(snapshot)
            snapshot = by_id.get(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
        recorded: list[int] = []
        for snapshot in reversed(seen):
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if WATERMARK_PROPERTY not in summary:
                continue
            recorded.append(parse_watermark(summary[WATERMARK_PROPERTY]))
            for done in json.loads(summary.get(PARTITIONS_DONE_PROPERTY, "[]")):
                if "null" not in parse_partition_path(done).values() and partition_end(table, done) > recorded[-1]:
                    raise Mismatch(f"snapshot {snapshot.snapshot_id} made {done} done below its end")
        if recorded != sorted(recorded):
            raise Mismatch(f"the watermark went back along main: {recorded}")
        self._check_late_rows(seen)
        now = recorded_watermark(table.metadata, self.branch)
        if self.last_watermark is not None and (now is None or now < self.last_watermark):
            raise Mismatch(f"the table's watermark went back from {self.last_watermark} to {now}")
        self.last_watermark = now

    def _check_late_rows(self, snapshots: list[Any]) -> None:
        """Each snapshot of the job counts exactly the late rows of the checkpoints it holds (those staged and
        committed; a discarded one's rows never reached the table)."""
        from icesink.catalog.checkpoints import CheckpointState
        from icesink.properties import CHECKPOINT_RANGE_PROPERTY, JOB_ID_PROPERTY, LATE_ROWS_PROPERTY

        committed = {
            row.checkpoint_id
            for row in Ledger(self.config).for_table(IDENTIFIER)
            if row.job_id == JOB and row.state == CheckpointState.COMMITTED
        }
        for snapshot in snapshots:
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if summary.get(JOB_ID_PROPERTY) != JOB or CHECKPOINT_RANGE_PROPERTY not in summary:
                continue
            first, _, last = summary[CHECKPOINT_RANGE_PROPERTY].partition("-")
            held = [c for c in range(int(first), int(last or first) + 1) if c in committed]
            if not held or any(c not in self.late_rows for c in held):
                continue  # pruned from the ledger, or staged before the table had an event time
            expected = sum(self.late_rows[c] for c in held)
            if int(summary.get(LATE_ROWS_PROPERTY, "0")) != expected:
                raise Mismatch(
                    f"snapshot {snapshot.snapshot_id} (checkpoints {held}) counts "
                    f"{summary.get(LATE_ROWS_PROPERTY)} late rows, not {expected}"
                )

    def referenced_files(self, identifier: str = IDENTIFIER) -> set[str]:
        """Every file a snapshot (current or not), the metadata log or a staged checkpoint still names."""
        from icesink.catalog.checkpoints import CheckpointState

        table = self.catalog.load_table(identifier)
        needed = {table.metadata_location, *(entry.metadata_file for entry in table.metadata.metadata_log)}
        for snapshot in table.snapshots():
            needed.add(snapshot.manifest_list)
            for manifest in snapshot.manifests(table.io):
                needed.add(manifest.manifest_path)
                entries = manifest.fetch_manifest_entry(table.io, discard_deleted=False)
                needed.update(entry.data_file.file_path for entry in entries)
        for row in Ledger(self.config).for_table(identifier, with_files=True):
            if row.state == CheckpointState.STAGED:  # its manifests, or the files its row holds
                needed.update(row.manifest_paths)
                needed.update(row.files.paths if row.files is not None else ())
        return needed

    def collect_garbage(self, dry_run: bool = False, identifier: str | None = None) -> list[str]:
        """What ``icesink committer gc --older-than 0s`` deletes (or would delete), of one table or of all."""
        import datetime

        from icesink.committer.gc import collect_garbage

        deleted = []
        for name in [identifier] if identifier else [IDENTIFIER] + ([COMPANION] if self.companion else []):
            deleted += collect_garbage(self.catalog, self.config, name, datetime.timedelta(0), dry_run=dry_run).deleted
        return deleted


def _parents(schema: Any, field_id: int) -> Iterator[int]:
    from icesink.iceberg.schemas import field_path

    for parent_id, _ in field_path(schema, field_id)[:-1]:
        yield parent_id


def _struct_members(schema: Any) -> Iterator[tuple[tuple[str, ...], Any, int]]:
    """Every struct member at any depth (top-level columns included): its path as pyiceberg spells it (list
    elements ``element``, map values ``value``), the field, and how many members its struct has."""
    from pyiceberg.types import ListType, MapType, StructType

    def walk(kind: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any, int]]:
        if isinstance(kind, StructType):
            for member in kind.fields:
                yield (*path, member.name), member, len(kind.fields)
                yield from walk(member.field_type, (*path, member.name))
        elif isinstance(kind, ListType):
            yield from walk(kind.element_type, (*path, "element"))
        elif isinstance(kind, MapType):
            yield from walk(kind.value_type, (*path, "value"))

    yield from walk(schema.as_struct(), ())


def _fresh_name(schema: Any, parent: tuple[str, ...], rng: random.Random, retired: list[str]) -> str:
    """A name no member of struct ``parent`` has, in any case; half the time one it had before."""
    from pyiceberg.types import ListType, MapType

    kind: Any = schema.as_struct()
    for name in parent:
        if isinstance(kind, ListType):
            kind = kind.element_type
        elif isinstance(kind, MapType):
            kind = kind.value_type
        else:
            kind = next(f.field_type for f in kind.fields if f.name == name)
    taken = {f.name.lower() for f in kind.fields}
    again = [name for name in retired if name.lower() not in taken]
    if again and rng.random() < 0.5:
        return rng.choice(again)
    while True:
        name = rng.choice(("added", "new col", "n%/ü", "z.z")) + str(rng.randrange(1000))
        if name.lower() not in taken:
            return name


def _local(uri: str) -> str:
    return uri.removeprefix("file://").removeprefix("file:")


# The input's splits (a Kafka topic's partitions): read by the tasks, not written.
SPLIT_COLUMN = "__icesink_split"


def _splits(checkpoint: int, rows: int) -> pa.Array:
    """Each row's split: "a" has rows in every checkpoint, "b" in two of every five and "c" in one of every
    seven, so that "b" and "c" fall idle (20 seconds of the world's clock pass per checkpoint, and a split is idle
    after 60) and come back, while "a" goes on. A function of the checkpoint, so that a re-delivered checkpoint
    splits its rows alike."""
    active = ["a", *(["b"] if checkpoint % 5 < 2 else []), *(["c"] if checkpoint % 7 == 0 else [])]
    return pa.array([active[i % len(active)] for i in range(rows)], pa.string())


def _rows_below(rows: pa.Table, column: str, late_before: int | None) -> int:
    """Rows whose event time is below ``late_before``: what the stream must count late, told independently of the
    writer (Python datetimes, not Arrow kernels)."""
    import datetime

    if late_before is None or column not in rows.column_names:
        return 0
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    count = 0
    for value in rows.column(column).to_pylist():
        if value is None:
            continue
        if not isinstance(value, datetime.datetime):  # a date: its midnight, UTC
            value = datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.UTC)
        elif value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        if (value - epoch) // datetime.timedelta(microseconds=1) < late_before:
            count += 1
    return count
