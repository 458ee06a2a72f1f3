"""``python -m tests.histories``: run histories for a while (or replay one seed) and print what was covered.

make histories MINUTES=60          # new seeds until the time is up
make histories SEED=1234           # replay one seed, shrink it if it fails
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.histories.runner import JavaCheck, check_with_iceberg_java, fails, generate, run, shrink


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.histories")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--length", type=int, default=30)
    parser.add_argument(
        "--spark", type=int, choices=(0, 1), help="1: through icesink.stream, 0: not; default: the seed decides"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the histories provoke warnings on purpose
    seeds = [args.seed] if args.seed is not None else None
    deadline = time.monotonic() + args.minutes * 60
    rng = random.Random()
    histories, steps, types, readers = 0, Counter[str](), Counter[str](), Counter[str]()
    failures: list[str] = []
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="icesink-histories-"))
    # Histories whose end Iceberg Java still has to read: one JVM reads a batch of them.
    waiting: list[tuple[int, bool, JavaCheck]] = []
    while (seeds and histories < len(seeds)) or (seeds is None and time.monotonic() < deadline):
        seed = seeds[histories] if seeds else rng.randrange(2**31)
        history = generate(seed, args.length, None if args.spark is None else bool(args.spark))
        directory = root / str(seed)
        outcome = run(history, directory)
        histories += 1
        steps.update(outcome.steps)
        readers.update(outcome.readers)
        types.update(_features(history))
        if outcome.java is not None:
            waiting.append((seed, history.writer is not None, outcome.java))
            readers["Iceberg Java"] += 1
        else:
            shutil.rmtree(directory)
        if outcome.failure is not None:
            short = shrink(history, fails)
            failures.append(f"{short.describe()}\n  failed with: {outcome.failure.splitlines()[0]}")
            _report(failures[-1], seed, history.writer is not None, started, histories)
        if len(waiting) >= JAVA_BATCH:
            failures += _read_with_iceberg_java(waiting, root, started, histories)
    failures += _read_with_iceberg_java(waiting, root, started, histories)
    shutil.rmtree(root)
    minutes = (time.monotonic() - started) / 60
    print(f"\n{histories} histories, {sum(steps.values())} steps in {minutes:.1f} min, {len(failures)} failed")
    print("steps:    " + ", ".join(f"{k} {v}" for k, v in sorted(steps.items())))
    print("readers:  " + ", ".join(f"{k} {v}" for k, v in sorted(readers.items())))
    print("features: " + ", ".join(f"{k} {v}" for k, v in sorted(types.items())))
    return 1 if failures else 0


JAVA_BATCH = 25


def _read_with_iceberg_java(
    waiting: list[tuple[int, bool, JavaCheck]], root: Path, started: float, done: int
) -> list[str]:
    """Iceberg Java reads the end of every waiting history (one JVM); returns the failures; empties the list."""
    if not waiting:
        return []
    found = []
    problems = check_with_iceberg_java([check for _, _, check in waiting])
    for (seed, through_spark, _), problem in zip(waiting, problems, strict=True):
        shutil.rmtree(root / str(seed))
        if problem is not None:
            found.append(f"seed {seed}: {problem}")
            _report(found[-1], seed, through_spark, started, done)
    waiting.clear()
    return found


def _report(failure: str, seed: int, spark: bool, started: float, histories: int) -> None:
    found_after = (time.monotonic() - started) / 60
    print(
        f"FAILED seed {seed} after {found_after:.1f} min, {histories} histories "
        f"(replay: make histories SEED={seed} SPARK={int(spark)})\n{failure}",
        flush=True,
    )


def _features(history: object) -> list[str]:
    """What a history's table covered: types, nesting, keys and partitioning."""
    from tests.histories.runner import History

    assert isinstance(history, History)
    shape = history.shape
    text = str(shape.schema)
    found = [t for t in ("struct", "list", "map", "uuid", "decimal", "fixed", "time", "binary") if t in text]
    found.append("keyed" if shape.keys else "appends")
    if any("." in k for k in shape.keys):
        found.append("key in struct")
    if shape.partition:
        found.append(shape.partition.split("(")[0] if "(" in shape.partition else "identity")
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
