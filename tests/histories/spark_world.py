"""The same world, written through a real ``icesink.stream``: a share of the histories takes the Spark paths.

Each checkpoint is one new Parquet file in the stream's input directory and one start of the query on its
checkpoint location (``availableNow``), so every step also restarts the stream. The input always carries the
table's current names (another tool may have renamed or dropped columns since), plus ``op`` and ``seq`` for
keyed tables. A replay removes Spark's record of the last batch, so that Spark itself runs it again.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from icesink.errors import SchemaMismatchError
from tests.histories.grammar import SPARK_PRIMITIVES, input_type, random_type
from tests.histories.world import IDENTIFIER, JOB, Mismatch, World


def spark_session() -> Any:
    """The test session's Spark, or one of its own for ``make histories``."""
    from tests.helpers.streams import local_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return local_session(app_name="icesink-histories", **{"spark.driver.memory": "1g"})


class SparkWorld(World):
    def __init__(self, config: Any, shape: Any, directory: Path, writer: str) -> None:
        super().__init__(config, shape)
        self.spark = spark_session()
        self.inputs = directory / "input"
        self.checkpoints = directory / "checkpoint"
        self.inputs.mkdir(parents=True)
        self.writer = writer
        # The inline committer maintains the table between commits (as the daemon's --maintain does), and
        # finds something to do at this small scale.
        with self.table().transaction() as change:
            change.set_properties({"icesink.maintain.min-commits": "1", "icesink.maintain.min-input-files": "2"})

    def stage(self, rows: pa.Table, ops: list[str]) -> int:
        """One micro-batch through the stream, staged for the daemon (``committer="daemon"``)."""
        return self._micro_batch(rows, ops, committer="daemon")

    def write_and_commit(self, rows: pa.Table, ops: list[str], expire: bool = False) -> None:
        self._micro_batch(rows, ops, committer="inline", expire_snapshots=expire, maintain=True)

    def evolve(self, rng: random.Random, size: int) -> None:
        """The stream's input gains a column the table lacks; ``evolve_schema=True`` adds it."""
        from pyiceberg.types import NestedField

        from tests.histories.grammar import Ids, random_value

        rows, ops = self.changes(rng, size)
        name = _fresh_column(self.table().schema(), rng)
        kind = random_type(rng, Ids(), 2, SPARK_PRIMITIVES)
        values = [random_value(rng, kind, False) for _ in range(rows.num_rows)]
        rows = rows.append_column(pa.field(name, input_type(kind)), pa.array(values, input_type(kind)))
        self._micro_batch(rows, ops, committer="inline", evolve_schema=True)
        added = self.table().schema().find_field(name)
        if not isinstance(added, NestedField) or added.required:
            raise Mismatch(f"evolve_schema did not add {name!r} as an optional column")
        self.apply_to_model(rows, ops)

    def replay(self, rng: random.Random) -> None:
        """Spark runs its last batch again (its commit record lost in a crash): icesink writes nothing twice."""
        commits = sorted((self.checkpoints / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
        if not commits:
            return
        record, crc = commits[-1], commits[-1].parent / f".{commits[-1].name}.crc"
        kept = {path: path.read_bytes() for path in (record, crc) if path.exists()}
        record.unlink()
        crc.unlink(missing_ok=True)  # else Spark suspects a rival
        before = self.table().current_snapshot()
        try:
            self._run_query(committer="inline")
        except SchemaMismatchError as e:
            if not self._refused_for_a_dropped_column(e):
                raise
            # The documented refusal: the stream's DataFrame still has a column another tool dropped, so it does
            # not start, and nothing is written. Spark's record of the batch is put back, as a user would
            # restart the stream once its DataFrame fits the table again.
            for path, data in kept.items():
                path.write_bytes(data)
            return
        if not commits[-1].exists():
            raise AssertionError(f"Spark did not run batch {commits[-1].name} again: the replay tested nothing")
        after = self.table().current_snapshot()
        if before is not None and after is not None and before.snapshot_id != after.snapshot_id:
            raise Mismatch(f"Spark's replay of batch {commits[-1].name} made snapshot {after.snapshot_id}")

    def _refused_for_a_dropped_column(self, error: Exception) -> bool:
        """icesink refused to start because a column of the batch was written to a field the table dropped since."""
        import re

        found = re.search(r"\(field id (\d+)\), which this stream writes, was dropped", str(error))
        if found is None:
            return False
        try:
            self.table().schema().find_field(int(found.group(1)))
        except ValueError:
            return True  # the field is gone from the table: the refusal is right
        return False

    def _micro_batch(self, rows: pa.Table, ops: list[str], **options: Any) -> int:
        checkpoint = self.next_checkpoint
        self.next_checkpoint += 1
        if self.key_ids:
            rows = rows.append_column("op", pa.array(ops, pa.string()))
            rows = rows.append_column("seq", pa.array(range(rows.num_rows), pa.int64()))
        path = self.inputs / f"part-{checkpoint:05d}.parquet"
        pq.write_table(rows, self.inputs / ".writing")
        (self.inputs / ".writing").rename(path)
        os.utime(path, (1_750_000_000 + checkpoint, 1_750_000_000 + checkpoint))  # Spark takes files by time
        self._run_query(schema=rows.schema, **options)
        return checkpoint

    def _run_query(self, schema: pa.Schema | None = None, **options: Any) -> None:
        from pyspark.sql.pandas.types import from_arrow_schema

        import icesink

        if schema is None:  # a replay: the last file's own schema
            last = sorted(self.inputs.glob("part-*.parquet"))[-1]
            schema = pq.read_schema(last)
        source = (
            self.spark.readStream.schema(from_arrow_schema(schema))
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.inputs))
        )
        keyed: dict[str, Any] = {"op_column": "op", "sequence_by": "seq"} if self.key_ids else {}
        query = icesink.stream(
            source,
            table=IDENTIFIER,
            checkpoint_location=str(self.checkpoints),
            trigger={"availableNow": True},
            catalog=self.config,
            job_id=JOB,
            writer=self.writer,
            **keyed,
            **options,
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"the stream failed: {query.exception()}")


def _fresh_column(schema: Any, rng: random.Random) -> str:
    taken = {f.name.lower() for f in schema.fields}
    while True:
        name = rng.choice(("grown", "new from stream", "é%/s", "s.t")) + str(rng.randrange(1000))
        if name.lower() not in taken:
            return name
