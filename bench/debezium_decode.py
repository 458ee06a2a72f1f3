"""What decoding Debezium records costs one core, without Spark.

The records of ``bench/debezium_throughput.py`` (one micro-batch of ``--events`` change events over ``--tables``
tables, about 2.7 kB each) are decoded by the task a Spark executor runs (``icesink.debezium_events.decode_task``)
in batches of 10,000, as Spark hands them over; then the rows it gives are read back as the write's task reads
them (``icesink.writer.json_tables``). Each is timed ``--repeat`` times in CPU seconds of this process; reported:
the fastest, as records a second. Run it in a checkout of another release to compare the two (it only uses
functions every release since the single-pass Debezium stream has).

    .venv/bin/python bench/debezium_decode.py [--tables 20] [--events 50000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.debezium_throughput import write_events
from icesink.debezium_events.decode_task import parse_task
from icesink.writer import json_tables

COLUMNS = ["key", "value", "topic", "partition", "offset"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as directory:
        write_events(Path(directory), args.tables, 1, args.events)
        lines = (Path(directory) / "part-00000.json").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    columns = {
        "key": pa.array([r["key"].encode() for r in records], pa.binary()),
        "value": pa.array([None if r["value"] is None else r["value"].encode() for r in records], pa.binary()),
        "topic": pa.array([r["topic"] for r in records]),
        "partition": pa.array([r["partition"] for r in records], pa.int32()),
        "offset": pa.array([r["offset"] for r in records], pa.int64()),
    }
    table = pa.table(columns)
    batches = table.to_batches(max_chunksize=10_000)

    def decode() -> list[pa.RecordBatch]:
        return list(parse_task(COLUMNS)(iter(batches)))

    decoded = decode()
    rows = [r for batch in decoded for r in batch.to_pylist()]

    def read_rows() -> None:
        for row in rows:
            json_tables._parse({json_tables.ROW: row["row"], json_tables.EXACT: row["schema_id"] == ""})

    report = {"records": len(records), "rows": len(rows)}
    for name, run, count in (("decode", decode, len(records)), ("read rows", read_rows, len(rows))):
        seconds = []
        for _ in range(args.repeat):
            started = time.process_time()
            run()
            seconds.append(time.process_time() - started)
        report[f"{name}_cpu_s"] = round(min(seconds), 3)
        report[f"{name}_per_second"] = round(count / min(seconds))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
