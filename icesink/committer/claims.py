"""Which stream of this driver publishes a table's branch: the one that met the table last.

Across processes and jobs the catalog database says whose a table is (``icesink_publishing``). Within one driver
a stream restarted under the same job id (the same checkpoint location) would pass for the one before it, whose
publish timer may still run: each stream takes a token when it starts and claims the branches it meets, and a
publisher skips a branch a stream started after its own claimed since.
"""

from __future__ import annotations

import itertools
import threading

from icesink.table_ref import TableRef

_claims: dict[tuple[str, TableRef], int] = {}  # (catalog, branch) -> the token of the newest stream that met it
_tokens = itertools.count(1)
_guard = threading.Lock()


def new_token() -> int:
    """A stream's token: streams started later have larger ones."""
    with _guard:
        return next(_tokens)


def claim(token: int, catalog: str, ref: TableRef) -> None:
    """The stream of ``token`` met the branch ``ref`` of a table of ``catalog``."""
    with _guard:
        _claims[(catalog, ref)] = max(token, _claims.get((catalog, ref), 0))


def claimed_by_another(token: int | None, catalog: str, ref: TableRef) -> bool:
    """Whether a stream started after the one of ``token`` met the branch (None: never)."""
    if token is None:
        return False
    with _guard:
        return _claims.get((catalog, ref), 0) > token
