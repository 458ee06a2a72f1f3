"""A long run at scale: many micro-batches of upserts into a large table, committed by the daemon with maintenance.

A table of ``--rows`` rows (written in id order by icesink's writer, as
bench/upsert_scale.py builds them) in a PostgreSQL catalog receives
``--batches`` micro-batches of 10,000 changes (5,000 updates of keys among the
newest 1%, 5,000 new keys) from one ``icesink.stream(..., committer="daemon")``,
one input file per trigger. ``icesink committer run --maintain
--expire-snapshots`` runs beside it as its own process and commits, converts
and compacts as it would in production.

Reported: the daemon's commit latency (its per-commit log lines), p50 and p99
per tenth of the run; and every ``--every`` batches, the read time of the
table (``icesink.read``) against a compacted copy of the same rows (written
once, no deletes), with the live data and delete files; and each maintenance
run of the daemon (its log lines): seconds and bytes rewritten, which should
follow the change, not the table (compare ``--rows 20000000`` with
``--rows 80000000``). The table is checked against the expected rows at the
end.

    .venv/bin/python bench/long_run.py [--rows 20000000] [--batches 200] [--every 25]

Needs PostgreSQL at 127.0.0.1:5432 (``ICESINK_TEST_PG_URL`` to point elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from upsert import SPARK_SCHEMA, iceberg_schema
from upsert_scale import build, changes

PG_ADMIN = os.environ.get("ICESINK_TEST_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
TABLE = "bench.orders"
COMMIT_LINE = re.compile(r"table=bench\.orders job=\S+ checkpoints=\S+ snapshot=\d+ .* seconds=([0-9.]+)")
MAINTENANCE_LINE = re.compile(r"table=bench\.orders maintenance: (.*); ([0-9.]+)s$", re.MULTILINE)
REWRITTEN = (
    re.compile(r"compacted \d+ file\(s\) \((\d+) bytes\)"),
    re.compile(r"merged \d+ position delete file\(s\) \((\d+) bytes\)"),
)


def maintenance_runs(log: str) -> list[dict[str, float]]:
    """Each maintenance run of the daemon's log that did something: its seconds and the bytes it rewrote."""
    runs = []
    for match in MAINTENANCE_LINE.finditer(log):
        text = match.group(1)
        rewritten = sum(int(m.group(1)) for pattern in REWRITTEN for m in pattern.finditer(text))
        if "compacted" in text or "merged" in text or "converted" in text:
            runs.append({"seconds": float(match.group(2)), "bytes_rewritten": rewritten})
    return runs


def summarise_maintenance(runs: list[dict[str, float]]) -> dict[str, Any]:
    if not runs:
        return {"runs": 0}
    seconds = [r["seconds"] for r in runs]
    rewritten = [r["bytes_rewritten"] for r in runs]
    return {
        "runs": len(runs),
        "p50_seconds": round(statistics.median(seconds), 3),
        "max_seconds": round(max(seconds), 3),
        "mean_seconds": round(statistics.mean(seconds), 3),
        "p50_bytes_rewritten": int(statistics.median(rewritten)),
        "max_bytes_rewritten": int(max(rewritten)),
        "mean_bytes_rewritten": int(statistics.mean(rewritten)),
    }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--every", type=int, default=25, help="read the table after this many batches")
    parser.add_argument("--keep", action="store_true", help="keep the catalog database and warehouse, to look at")
    args = parser.parse_args()

    import pyarrow.parquet as pq
    import sqlalchemy as sa
    from _spark import local_spark

    import icesink
    from icesink.catalog import database
    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.loader import open_catalog
    from icesink.iceberg.scan import live_files
    from icesink.paths import file_uri

    work = Path(tempfile.mkdtemp(prefix="icesink-bench-long-run-"))
    name = f"icesink_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    config = CatalogConfig("bench", url, file_uri(work / "wh"))
    database.upgrade(config)
    daemon = None
    spark = local_spark()
    try:
        catalog = open_catalog(config)
        catalog.create_namespace("bench")
        started = time.perf_counter()
        build(config, TABLE, args.rows)
        print(f"{args.rows} rows built in {time.perf_counter() - started:.0f} s", flush=True)
        log = (work / "daemon.log").open("w")
        daemon = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "icesink"),
                "--catalog",
                config.name,
                "--uri",
                url,
                "--warehouse",
                config.warehouse,
                "--verbose",
                "committer",
                "run",
                "--maintain",
                "--expire-snapshots",
                "--poll-interval",
                "0.2",
            ],
            stderr=log,
            stdout=log,
        )
        inputs = work / "changes"
        inputs.mkdir()
        written = []
        reads = []
        run_started = time.perf_counter()
        for number in range(args.batches):
            batch = changes(args.rows, "recent", number)
            written.append(batch)
            pq.write_table(batch, inputs / f"batch-{number:05d}.parquet")
            df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(inputs))
            icesink.stream(
                df,
                table=TABLE,
                checkpoint_location=str(work / "checkpoint"),
                trigger={"availableNow": True},
                equality_fields=["id"],
                committer="daemon",
                catalog=config,
            ).awaitTermination()
            if (number + 1) % args.every == 0:
                reads.append(read_point(config, catalog, number + 1, args.rows, written))
                print(json.dumps(reads[-1]), flush=True)
        seconds = time.perf_counter() - run_started
        wait_for_commits(config, args.batches)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
        log.close()
        commits = [float(m.group(1)) for m in COMMIT_LINE.finditer((work / "daemon.log").read_text())]
        tenth = max(1, len(commits) // 10)
        latency = [
            {
                "commits": f"{start + 1}-{min(len(commits), start + tenth)}",
                "p50_seconds": round(statistics.median(commits[start : start + tenth]), 3),
                "p99_seconds": round(percentile(commits[start : start + tenth], 0.99), 3),
            }
            for start in range(0, len(commits), tenth)
        ]
        from upsert_scale import check

        check(config, TABLE, args.rows, written)
        runs = maintenance_runs((work / "daemon.log").read_text())
        half = len(runs) // 2
        report = {
            "rows": args.rows,
            "batches": args.batches,
            "stream_seconds": round(seconds, 1),
            "commits": len(commits),
            "commit_latency": latency,
            # The second half, once the table is in its steady state, and the whole run.
            "maintenance": {"all": summarise_maintenance(runs), "second_half": summarise_maintenance(runs[half:])},
            "reads": reads,
            "equality_delete_files_at_end": len(live_files(catalog.load_table(TABLE)).equality_deletes),
        }
        print(json.dumps(report, indent=2))
        suffix = "" if args.rows == 20_000_000 else f"-{args.rows // 1_000_000}M"
        out = Path(__file__).parent / "results" / f"long_run{suffix}-raw.json"
        out.write_text(json.dumps({"command": " ".join(["bench/long_run.py", *sys.argv[1:]]), **report}, indent=2))
    except BaseException:
        log_path = work / "daemon.log"
        if log_path.exists():
            print("the daemon's log ends:\n" + log_path.read_text()[-4000:], file=sys.stderr)
        raise
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
        spark.stop()
        from icesink.catalog.database import dispose_engines

        dispose_engines()
        if args.keep:
            print(f"kept: --uri {url} --warehouse {config.warehouse} --catalog {config.name}", file=sys.stderr)
        else:
            with admin.connect() as connection:
                connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            shutil.rmtree(work, ignore_errors=True)


def wait_for_commits(config: Any, batches: int, seconds: float = 300) -> None:
    """Until the daemon has committed every staged checkpoint."""
    from icesink.catalog.ledger import Ledger

    deadline = time.monotonic() + seconds
    while Ledger(config).tables_with_pending():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not commit all {batches} checkpoints in {seconds:.0f} s")
        time.sleep(0.5)


def wait_for_maintenance(config: Any, seconds: float = 300) -> None:
    """Until no maintenance runs on the table (its maintenance lease released or expired): a read measured while
    a compaction runs on the other core measures the compaction."""
    import datetime

    import sqlalchemy as sa

    from icesink.catalog.database import as_utc, engine
    from icesink.catalog.lease import leases, maintenance_scope

    query = sa.select(leases.c.expires_at).where(
        leases.c.catalog_name == config.name, leases.c.scope == maintenance_scope(TABLE)
    )
    deadline = time.monotonic() + seconds
    quiet = 0
    while quiet < 3:  # maintenance starts right after a commit: make sure none is about to
        with engine(config).connect() as connection:
            expires = connection.execute(query).scalar()
        running = expires is not None and as_utc(expires) > datetime.datetime.now(datetime.UTC)
        quiet = 0 if running else quiet + 1
        if time.monotonic() > deadline:
            raise RuntimeError(f"maintenance of {TABLE} still running after {seconds:.0f} s")
        time.sleep(0.5)


def read_point(config: Any, catalog: Any, batches: int, rows: int, written: list[Any]) -> dict[str, Any]:
    """Once the daemon has caught up and no maintenance runs: the table's read time against a compacted copy,
    and its live files."""
    import icesink
    from icesink.iceberg.scan import live_files

    wait_for_commits(config, batches)
    wait_for_maintenance(config)
    state = icesink.read(TABLE, catalog=config)
    assert state.num_rows == rows + sum(b.num_rows // 2 for b in written), "rows lost or doubled"
    copy = f"bench.compacted_{batches}"
    compacted = catalog.create_table(copy, schema=iceberg_schema())
    compacted.append(state.cast(compacted.schema().as_arrow()))
    del state
    # Alternating, so that whatever else the machine does falls on both alike.
    times: list[float] = []
    copy_times: list[float] = []
    for _ in range(3):
        for name, into in ((TABLE, times), (copy, copy_times)):
            started = time.perf_counter()
            icesink.read(name, catalog=config)
            into.append(time.perf_counter() - started)
    catalog.purge_table(copy)
    live = live_files(catalog.load_table(TABLE))
    return {
        "batches": batches,
        "read_seconds": round(statistics.median(times), 3),
        "compacted_read_seconds": round(statistics.median(copy_times), 3),
        "ratio": round(statistics.median(times) / statistics.median(copy_times), 2),
        "read_rounds": [round(t, 3) for t in times],
        "compacted_read_rounds": [round(t, 3) for t in copy_times],
        "data_files": len(live.data),
        "position_delete_files": len(live.position_deletes),
        "equality_delete_files": len(live.equality_deletes),
    }


if __name__ == "__main__":
    main()
