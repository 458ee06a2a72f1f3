"""What every command is handed: the catalog it was pointed at (resolved on first use) and how to print."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icesink.cli.output import JSON, Output

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig


class CliContext:
    """The root options: ``--catalog``, ``--uri``, ``--warehouse`` and ``--output``."""

    def __init__(self, name: str | None, uri: str | None, warehouse: str | None, output: str) -> None:
        self._args = (name, uri, warehouse)
        self._config: CatalogConfig | None = None
        self._output = output

    @property
    def config(self) -> CatalogConfig:
        if self._config is None:
            from icesink.catalog.config import CatalogConfig

            name, uri, warehouse = self._args
            self._config = CatalogConfig.resolve(name=name, uri=uri, warehouse=warehouse)
        return self._config

    def catalog(self, pending_tables: bool = False) -> SqlCatalog:
        """The catalog; with ``pending_tables`` as committers see it, with the tables streams created that
        wait for their first commit (the commands about checkpoints and commits)."""
        from icesink.catalog.loader import open_catalog

        return open_catalog(self.config, pending_tables)

    def table(self, identifier: str, pending_tables: bool = False) -> Table:
        """The table; with ``pending_tables``, the one the streams of that name write (see ``catalog``)."""
        from icesink.catalog.loader import load_table

        return load_table(self.catalog(pending_tables), self.config, identifier, own=pending_tables)

    def output(self, as_json: bool = False) -> Output:
        """How to print: JSON if ``--output json`` or the command's own ``--json`` says so, else text."""
        return Output(JSON if as_json else self._output)
