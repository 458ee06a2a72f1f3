"""``python -m tests.histories``: run histories for a while (or replay one seed) and print what was covered.

make histories MINUTES=60          # new seeds until the time is up
make histories SEED=1234           # replay one seed, shrink it if it fails
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.histories.runner import fails, generate, run, shrink


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.histories")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--length", type=int, default=30)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the histories provoke warnings on purpose
    seeds = [args.seed] if args.seed is not None else None
    deadline = time.monotonic() + args.minutes * 60
    rng = random.Random()
    histories, steps, types = 0, Counter[str](), Counter[str]()
    failures: list[str] = []
    started = time.monotonic()
    while (seeds and histories < len(seeds)) or (seeds is None and time.monotonic() < deadline):
        seed = seeds[histories] if seeds else rng.randrange(2**31)
        history = generate(seed, args.length)
        with tempfile.TemporaryDirectory() as directory:
            outcome = run(history, Path(directory))
        histories += 1
        steps.update(outcome.steps)
        types.update(_features(history))
        if outcome.failure is not None:
            short = shrink(history, fails)
            failures.append(f"{short.describe()}\n  failed with: {outcome.failure.splitlines()[0]}")
            found_after = (time.monotonic() - started) / 60
            print(
                f"FAILED seed {seed} after {found_after:.1f} min, {histories} histories "
                f"(replay: make histories SEED={seed})\n{failures[-1]}",
                flush=True,
            )
    minutes = (time.monotonic() - started) / 60
    print(f"\n{histories} histories, {sum(steps.values())} steps in {minutes:.1f} min, {len(failures)} failed")
    print("steps:    " + ", ".join(f"{k} {v}" for k, v in sorted(steps.items())))
    print("features: " + ", ".join(f"{k} {v}" for k, v in sorted(types.items())))
    return 1 if failures else 0


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
