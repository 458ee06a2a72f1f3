"""The read modes of a changelog, checked the same way by every front door (``icesink.changes``,
``read_stream`` and ``spark.readStream.format("icesink")``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icesink.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.table import Table

MODES = ("changelog", "append")


def check_mode(identifier: str, mode: str, net_changes: bool, table: Table) -> None:
    if mode not in MODES:
        raise ConfigError(f"table {identifier}: mode must be one of {MODES}, not {mode!r}")
    if net_changes and mode != "changelog":
        raise ConfigError(f"table {identifier}: net_changes applies to mode='changelog'")
    if net_changes and not table.schema().identifier_field_ids:
        raise ConfigError(
            f"table {identifier} has no identifier fields, so a key's changes cannot be collapsed: set the table's "
            "identifier fields (icesink.stream(..., equality_fields=...) does) or read without net_changes"
        )
