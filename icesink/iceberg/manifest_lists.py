"""Manifest lists, read once per process.

A manifest list never changes once written, and the one a commit writes is the parent the next commit of its
table reads (with the planning of its deletes before that). pyiceberg reads the file again at every call
(it keeps the manifests, not the lists), which cost a committer about a millisecond per table and commit:
parsing the Avro header and resolving its schema. The lists are kept by their location, the one a commit
writes as it writes it, up to a budget of manifests, least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.snapshots import Snapshot

from icesink.iceberg import check_pyiceberg_version

check_pyiceberg_version()

# Manifests named by the lists kept, about a kilobyte each where lists do not share them (a committer's lists do:
# consecutive lists of a table name mostly the same manifests).
BUDGET_MANIFESTS = 20_000

_lock = threading.Lock()
_cached: OrderedDict[str, tuple[ManifestFile, ...]] = OrderedDict()
_held = [0]


def manifests_of(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    """The snapshot's manifests, as pyiceberg's ``Snapshot.manifests`` reads them."""
    location = snapshot.manifest_list
    with _lock:
        known = _cached.get(location)
        if known is not None:
            _cached.move_to_end(location)
            return list(known)
    manifests = tuple(snapshot.manifests(io))
    remember_list(location, manifests)
    return list(manifests)


def remember_list(location: str, manifests: Sequence[ManifestFile]) -> None:
    """The manifests of the list at ``location``, as written there."""
    with _lock:
        if location in _cached:
            return
        _cached[location] = tuple(manifests)
        _held[0] += len(manifests)
        while _held[0] > BUDGET_MANIFESTS and len(_cached) > 1:
            _, dropped = _cached.popitem(last=False)
            _held[0] -= len(dropped)


def is_kept(location: str) -> bool:
    """Whether the list at ``location`` is read from memory (for tests)."""
    with _lock:
        return location in _cached
