"""Freshness: how long from an event's creation to the moment a reader of the catalog can see it.

A feeder thread creates events at a steady rate (``--rate`` per second), writing them every quarter second as
a JSON-lines file of Kafka-like records that appears whole; a stream with a one-second trigger writes them
(``--mode append``: one append table; ``--mode debezium``: Debezium create events spread over ``--tables``
tables) with the inline committer or with ``icesink committer run`` beside it (``--committer daemon``); a
watcher polls the catalog every 20 ms, as a reader would, and notes when each table's record count grows. An
event is visible when its table's count first covers it (a table's events are committed in the order they were
created). The feeder and the watcher run in a process of their own, as a producer and a reader would, so that
they take nothing of the stream's driver (its Python threads share one interpreter lock). Reported: p50, p99
and max of (visible - created) over the events of ``--seconds`` seconds, after a warm-up.

    .venv/bin/python bench/freshness.py [--mode append|debezium] [--tables 20] [--rate 2000] [--seconds 180]
                                        [--committer inline|daemon]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.debezium_throughput import envelope_schema, key_schema
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import upgrade
from icesink.paths import file_uri

KAFKA_SCHEMA = "topic string, partition int, offset long, key string, value string"
APPEND_SCHEMA = "id long, table_no int, created_us long, name string"
WARM_UP_SECONDS = 20


class Feeder(threading.Thread):
    """Events at a steady rate, a file every quarter second; remembers when each event was created."""

    def __init__(self, directory: Path, mode: str, tables: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.directory = directory
        self.mode = mode
        self.tables = tables
        self.rate = rate
        self.created: list[list[float]] = [[] for _ in range(tables)]  # per table, in order
        self.stopping = threading.Event()
        self._offsets = [0] * tables
        self._schemas = [json.dumps(envelope_schema(self.topic(t))) for t in range(tables)]
        self._keys = [json.dumps(key_schema(self.topic(t))) for t in range(tables)]

    def topic(self, table: int) -> str:
        return f"dbserver1.public.t{table:03d}"

    def run(self) -> None:
        number = 0
        period = 0.25
        started = time.time()
        while not self.stopping.is_set():
            due = started + number * period
            time.sleep(max(0.0, due - time.time()))
            lines = [self._event(i) for i in range(int(self.rate * period))]
            temporary = self.directory / f".part-{number:07d}.tmp"
            temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
            temporary.rename(self.directory / f"part-{number:07d}.json")
            number += 1

    def _event(self, i: int) -> str:
        table = i % self.tables
        created = time.time()
        event_id = len(self.created[table])
        self.created[table].append(created)
        created_us = int(created * 1_000_000)
        if self.mode == "append":
            return json.dumps({"id": event_id, "table_no": table, "created_us": created_us, "name": f"n{event_id}"})
        after = {
            "id": event_id,
            "name": f"n{event_id}",
            "amount": "AA==",
            "updated": created_us,
            "qty": 1,
            "active": True,
        }
        source = {"name": "dbserver1", "db": "shop", "schema": "public", "table": f"t{table:03d}", "lsn": event_id}
        payload = {"before": None, "after": after, "source": source, "op": "c", "ts_ms": created_us // 1000}
        value = '{"schema":' + self._schemas[table] + ',"payload":' + json.dumps(payload, separators=(",", ":")) + "}"
        key = '{"schema":' + self._keys[table] + ',"payload":{"id":' + str(event_id) + "}}"
        offset = self._offsets[table]
        self._offsets[table] += 1
        record = {"topic": self.topic(table), "partition": 0, "offset": offset, "key": key, "value": value}
        return json.dumps(record, separators=(",", ":"))


class Watcher(threading.Thread):
    """Polls the catalog as a reader would; notes when each table's record count grows."""

    def __init__(self, config: CatalogConfig, identifiers: list[str]) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.identifiers = identifiers
        self.seen: list[list[tuple[float, int]]] = [[] for _ in identifiers]  # (when, records) per table
        self.stopping = threading.Event()

    def run(self) -> None:
        from pyiceberg.exceptions import NoSuchTableError

        from icesink.catalog.loader import open_catalog
        from icesink.catalog.pointers import every_pointer

        catalog = open_catalog(self.config)
        last: dict[str, str | None] = {}
        counts = [0] * len(self.identifiers)
        while not self.stopping.is_set():
            pointers = every_pointer(self.config)  # tables a stream creates appear with their first commit
            now = time.time()
            for number, identifier in enumerate(self.identifiers):
                location = pointers.get(identifier)
                if location is None or location == last.get(identifier):
                    continue
                try:
                    table = catalog.load_table(identifier)
                except NoSuchTableError:  # pending: created by the stream, not published yet
                    continue
                last[identifier] = location
                snapshot = table.current_snapshot()
                records = int(snapshot.summary["total-records"]) if snapshot and snapshot.summary else 0
                if records > counts[number]:
                    counts[number] = records
                    self.seen[number].append((now, records))
            time.sleep(0.02)


def observe(
    source: Path,
    mode: str,
    tables: int,
    rate: int,
    config: CatalogConfig,
    identifiers: list[str],
    seconds: int,
    outcome: Path,
) -> None:
    """The feeder and the watcher, in a process of their own; what they saw, into ``outcome``."""
    feeder = Feeder(source, mode, tables, rate)
    watcher = Watcher(config, identifiers)
    feeder.start()
    watcher.start()
    started = time.time()
    time.sleep(WARM_UP_SECONDS + seconds)
    feeder.stopping.set()
    time.sleep(10)  # the last events of the window are committed
    watcher.stopping.set()
    watcher.join()
    outcome.write_text(json.dumps({"started": started, "created": feeder.created, "seen": watcher.seen}))


def latencies(
    created_at: list[list[float]], seen_at: list[list[tuple[float, int]]], start: float, end: float
) -> list[float]:
    """visible - created of every event created in [start, end) and seen."""
    result = []
    for created, seen in zip(created_at, seen_at, strict=True):
        position = 0
        for index, moment in enumerate(created):
            while position < len(seen) and seen[position][1] <= index:
                position += 1
            if position == len(seen):
                break
            if start <= moment < end:
                result.append(seen[position][0] - moment)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["append", "debezium"], default="debezium")
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=180)
    parser.add_argument("--committer", choices=["inline", "daemon"], default="inline")
    args = parser.parse_args()
    tables = 1 if args.mode == "append" else args.tables

    import icesink
    from bench._spark import local_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(tempfile.mkdtemp(prefix="icesink-fresh-"))
    source = root / "in"
    source.mkdir()
    config = CatalogConfig(f"fresh_{uuid.uuid4().hex[:6]}", f"sqlite:///{root / 'catalog.db'}", file_uri(root / "wh"))
    upgrade(config)
    spark = local_spark()
    daemon = None
    try:
        if args.mode == "append":
            identifiers = ["bench.events"]
            df = spark.readStream.schema(APPEND_SCHEMA).json(str(source))
            query = icesink.stream(
                df,
                table=identifiers[0],
                create_table=True,
                checkpoint_location=str(root / "ckpt"),
                trigger={"processingTime": "1 second"},
                committer=args.committer,
                catalog=config,
            )
        else:
            identifiers = [f"bench.t{t:03d}" for t in range(tables)]
            df = spark.readStream.schema(KAFKA_SCHEMA).json(str(source))
            query = icesink.stream(
                df,
                tables=icesink.debezium("bench"),
                checkpoint_location=str(root / "ckpt"),
                trigger={"processingTime": "1 second"},
                committer=args.committer,
                catalog=config,
            )
        if args.committer == "daemon":
            base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
            daemon = subprocess.Popen(
                [sys.executable, "-m", "icesink.cli", *base, "committer", "run", "--poll-interval", "0.1"],
                stderr=subprocess.DEVNULL,
            )
        outcome = root / "observed.json"
        observer = multiprocessing.get_context("spawn").Process(
            target=observe, args=(source, args.mode, tables, args.rate, config, identifiers, args.seconds, outcome)
        )
        observer.start()
        observer.join()
        query.stop()
        observed = json.loads(outcome.read_text())
        started, created_at, seen = observed["started"], observed["created"], observed["seen"]
        window = (started + WARM_UP_SECONDS, started + WARM_UP_SECONDS + args.seconds)
        measured = latencies(created_at, seen, *window)
        created = sum(1 for c in created_at for m in c if window[0] <= m < window[1])
        measured.sort()
        report: dict[str, Any] = {
            "mode": args.mode,
            "tables": tables,
            "rate": args.rate,
            "committer": args.committer,
            "events": created,
            "seen": len(measured),
            "p50_s": round(statistics.median(measured), 2) if measured else None,
            "p99_s": round(measured[int(len(measured) * 0.99) - 1], 2) if measured else None,
            "max_s": round(measured[-1], 2) if measured else None,
        }
        print(json.dumps(report, indent=2))
        if measured:
            record_run(args, report)
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(10)
        shutil.rmtree(root, ignore_errors=True)


def group_of(args: argparse.Namespace) -> str:
    if args.mode == "append":
        return f"1 table, appends ({args.committer})"
    return f"{args.tables} tables, Debezium ({args.committer})"


def record_run(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The run's p50 and p99 into bench/results/freshness.json, in its group (the others keep theirs)."""
    from bench.figures import record_values

    if args.rate != 2000:
        print("freshness: not recorded: the chart is of 2,000 events/s", file=sys.stderr)
        return
    group = group_of(args)
    command = " ".join(["bench/freshness.py", *sys.argv[1:]])
    record_values("freshness", {"p50": {group: report["p50_s"]}, "p99": {group: report["p99_s"]}}, command)


if __name__ == "__main__":
    main()
