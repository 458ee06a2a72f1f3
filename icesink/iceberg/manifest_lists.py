"""Manifest lists, read once per process.

A manifest list never changes once written, and the one a commit writes is the parent the next commit of its
table reads (with the planning of its deletes before that). pyiceberg reads the file again at every call
(it keeps the manifests, not the lists), which cost a committer about a millisecond per table and commit:
parsing the Avro header and resolving its schema. The lists are kept by their location, the one a commit
writes as it writes it, up to a budget of manifests, least recently used first out (a list of more than a
quarter of the budget is read each time).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.snapshots import Snapshot

from icesink.iceberg import check_pyiceberg_version
from icesink.iceberg.read_caches import Kept

check_pyiceberg_version()

# Manifests named by the lists kept, about a kilobyte each where lists do not share them (a committer's lists do:
# consecutive lists of a table name mostly the same manifests).
BUDGET_MANIFESTS = 20_000

# A list counts its manifests and one more, so that lists of no manifest count too.
_LISTS: Kept[tuple[ManifestFile, ...]] = Kept(BUDGET_MANIFESTS, lambda manifests: len(manifests) + 1)


def manifests_of(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    """The snapshot's manifests, as pyiceberg's ``Snapshot.manifests`` reads them."""
    location = snapshot.manifest_list
    known = _LISTS.get(location)
    if known is not None:
        return list(known)
    manifests = tuple(snapshot.manifests(io))
    remember_list(location, manifests)
    return list(manifests)


def remember_list(location: str, manifests: Sequence[ManifestFile]) -> None:
    """The manifests of the list at ``location``, as written there."""
    _LISTS.put(location, tuple(manifests))


def is_kept(location: str) -> bool:
    """Whether the list at ``location`` is read from memory (for tests)."""
    return _LISTS.get(location) is not None
