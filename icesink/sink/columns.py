"""Referring to DataFrame columns by name, whatever the name holds.

Iceberg allows any column name; Spark parses the text of ``F.col`` (a dot
reaches into a struct, a backtick starts a quoted name). Quoting every name,
with its own backticks doubled, makes Spark take it literally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier that means exactly this column."""
    return "`" + name.replace("`", "``") + "`"


def column(name: str) -> Column:
    """The DataFrame column called ``name`` (dots, backticks, spaces and all)."""

    return F.col(quoted(name))


def nested(path: tuple[str, ...]) -> Column:
    """The field at ``path``: a column, then fields of structs by their literal names."""
    value = column(path[0])
    for name in path[1:]:
        value = value.getField(name)
    return value
