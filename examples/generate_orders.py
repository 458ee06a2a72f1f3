"""Drop a file of new JSON orders into a directory every few seconds: the input of examples/stream_job.py.

python examples/generate_orders.py /data/orders --every 5 [--rows 1000] [--files N]
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import time
from pathlib import Path


def write_file(directory: Path, number: int, rows: int) -> None:
    rng = random.Random(number)
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    tmp = directory / f".orders-{number:06d}.json.tmp"
    with tmp.open("w") as f:
        for i in range(number * rows, (number + 1) * rows):
            ordered_at = start + datetime.timedelta(minutes=rng.randrange(60 * 24 * 7))
            record = {
                "order_id": i,
                "customer": f"customer-{rng.randrange(500):03d}",
                "amount": round(rng.uniform(1, 500), 2),
                "ordered_at": ordered_at.isoformat(),
            }
            f.write(json.dumps(record) + "\n")
    tmp.rename(directory / f"orders-{number:06d}.json")  # the file source never sees a half-written file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between files")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--files", type=int, default=0, help="stop after this many files (0: never)")
    args = parser.parse_args()
    args.directory.mkdir(parents=True, exist_ok=True)
    number = len(list(args.directory.glob("orders-*.json")))
    while not args.files or number < args.files:
        write_file(args.directory, number, args.rows)
        number += 1
        time.sleep(args.every)


if __name__ == "__main__":
    main()
