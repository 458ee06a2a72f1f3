"""Which older data files a snapshot's new equality deletes can reach, judged by their keys and the files' bounds.

An equality delete removes its keys from every older data file of its partition, so a change reader would read
each of them whole to learn which rows went. Most hold none of the deleted keys: their key columns' bounds say
so (as the committer's conversion of equality deletes judges them, :mod:`icesink.iceberg.key_pruning`), and
their rows are what they were.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icesink.iceberg.deletes import EqualityDeletes
from icesink.iceberg.key_pruning import KeyPruning

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icesink.changelog.plan import SnapshotChanges


def unreached(table: Table, schema: Schema, part: SnapshotChanges) -> frozenset[str]:
    """The data files of ``part.changed`` whose rows the snapshot leaves as they were: no position delete of
    theirs changed, and no equality delete the snapshot added can hold one of their keys. Nothing when the
    snapshot removed an equality delete (its rows would come back: only a rewrite does that, with position deletes
    or new files instead, and is read whole)."""
    before = {str(d.file.file_path) for d in part.equality_before}
    after = {str(d.file.file_path) for d in part.equality_after}
    if not after - before or before - after:
        return frozenset()
    fresh = [d for d in part.equality_after if str(d.file.file_path) not in before]
    candidates = [c for c in part.changed if c.after is not None and c.after == c.before]
    if not candidates:
        return frozenset()
    reached = KeyPruning(table, schema, EqualityDeletes(table, schema, fresh)).files(c.data for c in candidates)
    kept = {live.path for live in reached}
    return frozenset(c.data.path for c in candidates if c.data.path not in kept)
