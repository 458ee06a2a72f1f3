"""Where a stream's Spark checkpoint lives: the default location, and what a stream killed at its very first
offset leaves there."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from icesink import paths
from icesink.paths import segment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("icesink.stream")


def checkpoint_location(df: DataFrame, given: str | None, query_name: str | None, written: str) -> str | None:
    """The location given, else a directory of the stream's own under the session's default location.

    As Spark does for a named query, the directory is named after the query, else after what the stream
    writes, so that two streams relying on the default never share a checkpoint, and a restart finds its own.
    """
    if given:
        return given
    default = df.sparkSession.conf.get("spark.sql.streaming.checkpointLocation", None)
    if not default:
        return None

    return f"{default.rstrip('/')}/{segment(query_name or written)}"


def clear_unfinished_first_offset(location: str | None) -> None:
    """Spark 4 refuses a checkpoint location whose ``offsets`` directory holds files while it records no
    micro-batch, and a stream killed while writing its very first offset leaves just that: the unfinished
    temporary file (and its checksum). It names no batch Spark ever ran, so nothing was written or staged for
    it; it goes, and the stream starts. Local locations only (object stores write offsets without one)."""

    parsed = paths.parse(location or "")
    offsets = Path(parsed.path) / "offsets"
    if not location or not parsed.is_local or not offsets.is_dir():
        return
    names = [p.name for p in offsets.iterdir()]
    if any(not name.startswith(".") for name in names):
        return  # an offset was recorded: Spark's own recovery applies
    for name in names:
        if name.endswith((".tmp", ".tmp.crc")):
            log.warning(
                "checkpoint location %s: removing %s, left by a stream killed at its first offset", location, name
            )
            (offsets / name).unlink(missing_ok=True)
