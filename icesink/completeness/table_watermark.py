"""``icesink.watermark``: how far a table's data is complete, as the table records it."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from icesink.completeness.watermark import micros_to_datetime
from icesink.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig


def watermark(
    table: str | Table,
    branch: str = "main",
    catalog: str | CatalogConfig | dict[str, str] | None = None,
) -> datetime.datetime | None:
    """The table's event-time watermark as an aware ``datetime`` (UTC), or None before the first.

    It is the ``icesink.watermark`` of the newest snapshot on ``branch``'s ancestry that holds one: every row
    whose event time is below it has arrived (give or take the stream's ``lateness``). Snapshots of other tools
    hold none and are passed over.

    Args:
        table: ``namespace.table`` (looked up in ``catalog``) or a pyiceberg ``Table``.
        branch: the branch whose history to read.
        catalog: as for :func:`icesink.stream`.
    """
    from icesink.iceberg.watermarks import recorded_watermark

    if isinstance(table, str):
        from icesink.catalog.config import resolve_catalog
        from icesink.catalog.loader import load_table, open_catalog

        config = resolve_catalog(catalog)
        table = load_table(open_catalog(config), config, table)
    if branch not in table.metadata.refs and table.metadata.refs:
        raise ConfigError(
            f"table {'.'.join(table.name())} has no branch {branch!r} (it has {', '.join(sorted(table.metadata.refs))})"
        )
    micros = recorded_watermark(table.metadata, branch)
    return micros_to_datetime(micros) if micros is not None else None
