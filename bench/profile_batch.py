"""Where the time of one append micro-batch goes: Spark's streaming phases and icesink's own.

Streams ``--rows`` rows (id long, name string, amount double, ts timestamp) as
one micro-batch into an unpartitioned table (Spark's Parquet writer) after a
warm-up run, ``--repeat`` times, and reports the median milliseconds of:

* the whole run (``start()`` to termination) and what Spark reports in the
  query's progress (``latestOffset``, ``queryPlanning``, ``walCommit`` (the offset
  log), ``addBatch`` (the ``foreachBatch`` call), ``commitOffsets`` (the commit log));
* inside ``addBatch``, icesink's phases: ``check`` (table, marker, ledger),
  ``write`` (Spark's write job), ``footers+moves``, ``stage`` (delta manifest,
  ledger), ``commit`` (snapshot, compare-and-swap, ledger, cleanup).

    .venv/bin/python bench/profile_batch.py [--rows 2000000,4000000,8000000] [--files 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))

from append_throughput import SCHEMA, local_catalog, make_input


class PhaseRecorder(logging.Handler):
    """Keeps the phases icesink logs for every micro-batch."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.phases: list[dict[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.endswith(" took %s") and record.args:
            self.phases.append(dict(record.args[-1].milliseconds))  # type: ignore[index,union-attr]


def one_run(spark: Any, source: Path, work: Path, name: str, config: Any) -> tuple[float, dict[str, int]]:
    import icesink

    df = spark.readStream.schema(SCHEMA).parquet(str(source))
    started = time.perf_counter()
    query = icesink.stream(
        df,
        table=f"bench.{name}",
        checkpoint_location=str(work / f"ckpt-{name}"),
        trigger={"availableNow": True},
        create_table=True,
        catalog=config,
    )
    query.awaitTermination()
    total = time.perf_counter() - started
    spark_phases: dict[str, int] = {}
    for progress in query.recentProgress:
        for key, value in progress.durationMs.items():
            spark_phases[key] = spark_phases.get(key, 0) + int(value)
    return total * 1000, spark_phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="2000000,4000000,8000000")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from _spark import local_spark

    recorder = PhaseRecorder()
    logger = logging.getLogger("icesink.stream")
    logger.addHandler(recorder)
    logger.setLevel(logging.INFO)
    spark = local_spark()
    work = Path(tempfile.mkdtemp(prefix="icesink-bench-profile-"))
    report: dict[str, Any] = {}
    try:
        config = local_catalog(work)
        for rows in (int(r) for r in args.rows.split(",")):
            source = work / f"input-{rows}"
            make_input(source, rows, args.files)
            one_run(spark, source, work, f"warm_{rows}", config)
            totals, sparks, ours = [], [], []
            for number in range(args.repeat):
                recorder.phases.clear()
                total, spark_phases = one_run(spark, source, work, f"p{rows}_{number}", config)
                totals.append(total)
                sparks.append(spark_phases)
                ours.append(recorder.phases[-1])
            keys = sorted({k for s in sparks for k in s})
            phases = {f"spark.{k}": round(statistics.median(s.get(k, 0) for s in sparks)) for k in keys}
            phases.update({f"icesink.{k}": round(statistics.median(p.get(k, 0.0) for p in ours)) for k in ours[0]})
            report[str(rows)] = {"total_ms": round(statistics.median(totals)), **phases}
        print(json.dumps(report, indent=2))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
