"""A reader of the catalog's pointers, in its own process: ``python -m tests.helpers.catalog_watcher URI CATALOG OUT``.

It reads every table's metadata location in one statement (one transaction), in a tight loop, and
appends each state it has not seen before to OUT as a JSON line, until it is killed. Atomicity tests
then check that every state it saw is a consistent cut of a job's checkpoints.
"""

from __future__ import annotations

import json
import os
import sys

import sqlalchemy as sa


def main(uri: str, catalog: str, out: str) -> None:
    # Still a tight loop (a torn state would last a moment), but behind the committers and other tests' work.
    os.nice(10)
    engine = sa.create_engine(uri)
    query = sa.text("SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :c")
    last = None
    with open(out, "a", encoding="utf-8") as sink:
        while True:
            try:
                with engine.connect() as connection:
                    state = {f"{ns}.{name}": loc for ns, name, loc in connection.execute(query, {"c": catalog})}
            except sa.exc.OperationalError:  # a SQLite file locked by a writer: read again
                continue
            if state != last:
                sink.write(json.dumps(state) + "\n")
                sink.flush()
                last = state


if __name__ == "__main__":
    main(*sys.argv[1:4])
