"""Doubles read from Avro files at full precision.

pyiceberg 0.12's compiled Avro decoder returns every double it reads at float precision: 0.1 comes back as
0.10000000149011612, 1e300 as infinity, 5e-324 as zero (apache/iceberg-python#3808, fixed after 0.12). The
doubles of a manifest are the partition values of a double column. Read rounded, a filter on the column prunes
the files of its partitions away (rows silently missing from a read), and a manifest written again from what was
read (manifest merging, maintenance) would store the rounded values for every reader of the table.

:func:`read_doubles_exactly` makes pyiceberg's reader of a double read its 8 bytes itself; the package installs
it on import, so every process that reads a manifest through icesink reads doubles exactly. pyiceberg used
directly in the same process gets the correction too.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.avro.decoder import BinaryDecoder

_DOUBLE = struct.Struct("<d")  # Avro writes a double as its 8 bytes, little-endian


def _read_double(self: object, decoder: BinaryDecoder) -> float:
    return float(_DOUBLE.unpack(decoder.read(8))[0])


def read_doubles_exactly() -> None:
    from pyiceberg.avro.reader import DoubleReader

    DoubleReader.read = _read_double  # type: ignore[method-assign]
