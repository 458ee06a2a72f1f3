"""``python -m tests.histories``: run histories for a while (or replay one seed) and print what was covered.

make histories MINUTES=60          # new seeds until the time is up
make histories SEED=1234           # replay one seed, shrink it if it fails
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.histories.runner import (
    History,
    JavaCheck,
    check_with_iceberg_java,
    fails,
    generate,
    run,
    shrink,
    signature,
)


@dataclass
class Tally:
    """What a run covered and found."""

    started: float = field(default_factory=time.monotonic)
    histories: int = 0
    steps: Counter[str] = field(default_factory=Counter)
    readers: Counter[str] = field(default_factory=Counter)
    features: Counter[str] = field(default_factory=Counter)
    maintenance: Counter[str] = field(default_factory=Counter)  # snapshots maintenance made, by kind
    failures: list[str] = field(default_factory=list)

    def failed(self, failure: str, seed: int, replay: str) -> None:
        self.failures.append(failure)
        found_after = (time.monotonic() - self.started) / 60
        print(
            f"FAILED seed {seed} after {found_after:.1f} min, {self.histories} histories "
            f"(replay: make histories SEED={seed} {replay})\n{failure}",
            flush=True,
        )

    def print(self) -> None:
        minutes = (time.monotonic() - self.started) / 60
        print(f"\n{self.histories} histories, {sum(self.steps.values())} steps in {minutes:.1f} min, ", end="")
        print(f"{len(self.failures)} failed")
        print("steps:    " + ", ".join(f"{k} {v}" for k, v in sorted(self.steps.items())))
        print("readers:  " + ", ".join(f"{k} {v}" for k, v in sorted(self.readers.items())))
        print("features: " + ", ".join(f"{k} {v}" for k, v in sorted(self.features.items())))
        print("maintenance snapshots: " + ", ".join(f"{k} {v}" for k, v in sorted(self.maintenance.items())))


@dataclass(frozen=True)
class Waiting:
    """A history whose end Iceberg Java still has to read (one JVM reads a batch of them)."""

    seed: int
    replay: str
    check: JavaCheck


JAVA_BATCH = 25
POSTGRESQL_SHARE = 4  # one history in this many keeps its catalog in PostgreSQL, where one is reachable


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.histories")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--length", type=int, default=30)
    parser.add_argument("--spark", type=int, choices=(0, 1), help="1: through icesink.stream, 0: not; default: drawn")
    parser.add_argument("--catalog", choices=("sqlite", "postgresql"), help="default: a share on PostgreSQL")
    args = parser.parse_args(argv)
    from tests.conftest import JAVA_READER_VENV

    if not (JAVA_READER_VENV / "bin" / "python").exists():
        raise SystemExit(f"{JAVA_READER_VENV} is missing (Iceberg Java reads histories' ends): make install-interop")
    logging.basicConfig(level=logging.ERROR)  # the histories provoke warnings on purpose
    deadline = time.monotonic() + args.minutes * 60
    tally, root, waiting = Tally(), Path(tempfile.mkdtemp(prefix="icesink-histories-")), list[Waiting]()
    with postgresql(args.catalog) as database_url, _removed_after(root):
        rng = random.Random()
        while (args.seed is not None and tally.histories == 0) or (args.seed is None and time.monotonic() < deadline):
            seed = args.seed if args.seed is not None else rng.randrange(2**31)
            on_postgresql = database_url is not None and (args.catalog == "postgresql" or seed % POSTGRESQL_SHARE == 0)
            history = generate(seed, args.length, None if args.spark is None else bool(args.spark))
            waiting += _run_one(history, root, database_url if on_postgresql else None, tally)
            if len(waiting) >= JAVA_BATCH or not (args.seed is None and time.monotonic() < deadline):
                _read_with_iceberg_java(waiting, root, tally)
    tally.print()
    return 1 if tally.failures else 0


def _run_one(history: History, root: Path, database_url: str | None, tally: Tally) -> list[Waiting]:
    """Run one history (shrunk if it fails); returns it if Iceberg Java is still to read its end."""
    seed = history.seed
    replay = f"LENGTH={len(history.steps)} SPARK={int(history.writer is not None)} "
    replay += f"CATALOG={'postgresql' if database_url else 'sqlite'}"
    outcome = run(history, root / str(seed), database_url=database_url)
    tally.histories += 1
    tally.steps.update(outcome.steps)
    tally.readers.update(outcome.readers)
    tally.maintenance.update(outcome.maintenance)
    tally.features.update(_features(history) + (["PostgreSQL"] if database_url else []))
    if outcome.failure is not None:
        like = signature(outcome.failure)
        short = shrink(history, functools.partial(fails, database_url=database_url, like=like))
        tally.failed(f"{short.describe()}\n  failed with: {outcome.failure.splitlines()[0]}", seed, replay)
    if outcome.java is None:
        shutil.rmtree(root / str(seed))
        return []
    return [Waiting(seed, replay, outcome.java)]


@contextlib.contextmanager
def _removed_after(root: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def postgresql(catalog: str | None) -> Iterator[str | None]:
    """A new, migrated PostgreSQL database for the run (dropped after it), or None where none is reachable."""
    from tests.conftest import PG_URL, _pg_problem, create_pg_database, drop_pg_database

    problem = None if catalog == "sqlite" else _pg_problem()
    if catalog == "sqlite" or problem:
        if catalog == "postgresql":
            raise SystemExit(problem)
        print(f"every history on SQLite: {problem}" if problem else "every history on SQLite", flush=True)
        yield None
        return
    from icesink.catalog import database
    from icesink.catalog.config import CatalogConfig

    url = create_pg_database(PG_URL)
    database.upgrade(CatalogConfig(name="setup", uri=url, warehouse="file:///unused"))
    try:
        yield url
    finally:
        drop_pg_database(PG_URL, url)


def _read_with_iceberg_java(waiting: list[Waiting], root: Path, tally: Tally) -> None:
    """Iceberg Java reads the end of every waiting history (one JVM); empties the list."""
    if not waiting:
        return
    problems = check_with_iceberg_java([w.check for w in waiting])
    for history, problem in zip(waiting, problems, strict=True):
        shutil.rmtree(root / str(history.seed))
        tally.readers["Iceberg Java"] += 1
        if problem is not None:
            tally.failed(f"seed {history.seed}: {problem}", history.seed, history.replay)
    waiting.clear()


def _features(history: History) -> list[str]:
    """What a history's table covered: types, nesting, keys and partitioning, and how it was written."""
    shape = history.shape
    text = str(shape.schema)
    kinds = ("struct", "list", "map", "uuid", "decimal", "fixed", "time", "timestamp", "binary", "date")
    found = [kind for kind in kinds if re.search(rf"\b{kind}\b", text)]
    found.append("keyed" if shape.keys else "appends")
    if set(shape.keys) - {f.name for f in shape.schema.fields}:
        found.append("key in struct")
    if history.writer:
        found.append(f"icesink.stream (writer={history.writer})")
    if history.atomic:
        found.append("atomic with a second table")
    if shape.partition:
        found.append(shape.partition.split("(")[0] if "(" in shape.partition else "identity")
    if any(str(f.field_type) in ("date", "timestamp", "timestamptz") for f in shape.schema.fields):
        found.append("event-time watermark")  # the first top-level time column (tests/histories/world.py)
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
