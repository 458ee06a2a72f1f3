"""Where a stream's checkpoints land: a table of the catalog and a branch of it.

One value from the stream's settings through staging, the ledger, the marker lookup and the commit, so
that a feature committing elsewhere than ``main`` (write-audit-publish) changes the value, not the code.
"""

from __future__ import annotations

from dataclasses import dataclass

# Iceberg's default branch: the one readers see unless they ask for another.
MAIN_BRANCH = "main"


@dataclass(frozen=True, order=True)
class TableRef:
    """A table (``namespace.table``) and the branch of it that commits move."""

    identifier: str
    branch: str = MAIN_BRANCH

    @property
    def on_main(self) -> bool:
        return self.branch == MAIN_BRANCH

    def __str__(self) -> str:
        """As messages name it: the table, and its branch unless that is ``main``."""
        return self.identifier if self.on_main else f"{self.identifier} (branch {self.branch})"
