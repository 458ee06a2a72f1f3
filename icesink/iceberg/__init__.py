"""icesink's boundary with pyiceberg: every use of pyiceberg internals lives in this package.

pyiceberg 0.12.0 (pinned exactly in pyproject.toml) has no public API for
what icesink needs, so these modules build on its internals, one concern each:

* :mod:`~icesink.iceberg.manifests`: executor file records as manifest entries,
  the per-checkpoint delta manifests of releases before 0018, delete manifests (pyiceberg's writers
  always write ``content: data`` and declare ``equality_ids`` as
  ``list<long>``, apache/iceberg-python#3840), partition field names that
  every Avro reader accepts;
* :mod:`~icesink.iceberg.snapshots`: appends and row deltas built on a known
  head and swapped into the catalog exactly once per attempt
  (``Transaction.commit_transaction`` retries a failed swap by rebuilding
  the snapshot without re-checking icesink's committed-checkpoint marker);
* :mod:`~icesink.iceberg.merging` and :mod:`~icesink.iceberg.expiry`: what keeps
  every commit as cheap as the first (manifest merging, snapshot expiry);
* :mod:`~icesink.iceberg.summaries`: snapshot summaries, Iceberg's counts beside icesink's properties;
* :mod:`~icesink.iceberg.marker`: which checkpoints a job has in the table (on a branch);
* :mod:`~icesink.iceberg.references`: what a table references and what its location holds;
* :mod:`~icesink.iceberg.scan`: scan planning that keeps equality deletes, file reads;
* :mod:`~icesink.iceberg.file_reads`: one data file read into a schema without losing a value
  (pyiceberg's projection turns null lists and maps of structs into empty ones);
* :mod:`~icesink.iceberg.deletes`: the equality deletes of a table, grouped by the partition they apply to;
* :mod:`~icesink.iceberg.describe`: what executors need to know of a table (its columns, partitioning,
  Parquet settings), as icesink's own typed values;
* :mod:`~icesink.iceberg.history`: the snapshots between two states of a branch, for change reads;
* :mod:`~icesink.iceberg.schemas`: schema changes as values, paths of nested fields, field ids of files;
* :mod:`~icesink.iceberg.avro_doubles`: doubles read from manifests at full precision (installed on import:
  pyiceberg 0.12's compiled decoder rounds them to floats).

Nothing outside this package imports pyiceberg's private names.
``tests/test_iceberg_boundary.py`` exercises each of them so that a pyiceberg
upgrade that moves or changes one fails loudly there.
"""

from __future__ import annotations

from icesink.iceberg.avro_doubles import read_doubles_exactly

PYICEBERG_VERSION = "0.12.0"

read_doubles_exactly()


def check_pyiceberg_version() -> None:
    import pyiceberg

    if pyiceberg.__version__ != PYICEBERG_VERSION:
        raise ImportError(
            f"icesink extends pyiceberg {PYICEBERG_VERSION} internals but pyiceberg {pyiceberg.__version__} "
            f"is installed; install pyiceberg=={PYICEBERG_VERSION}"
        )
