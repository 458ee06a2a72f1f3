"""The reading half of a pipeline (``icesink.changes``, ``read_stream``): what changed in a table, as rows.

* :mod:`~icesink.changelog.plan` (driver): the snapshots of a range on ``main``,
  and per snapshot and partition the data files it added, the data files whose
  live rows it changed (new deletes, or removed), and the deletes before and
  after, as plain picklable values;
* :mod:`~icesink.changelog.compute` (executors, or the driver for a batch read):
  the rows those files hold, alive before and after, as ``insert`` /
  ``delete`` / ``update_before`` / ``update_after`` changes;
* :mod:`~icesink.changelog.source`: ``spark.readStream.format("icesink")``
  (pyspark's Python data source API), offsets being snapshots of ``main``;
* :mod:`~icesink.changelog.api`: ``icesink.changes`` (batch), ``read_stream`` and ``register``.

A row's change is found by comparing which rows of a data file are alive
before and after the snapshot (position and equality deletes applied by the
Iceberg rules), so every writer's snapshots are understood: icesink's row
deltas with equality or position deletes, merge-on-read deltas of other
engines, copy-on-write overwrites (rows rewritten unchanged are dropped as
carry-overs). Snapshots that change no rows (compaction, delete conversion,
any ``replace``) yield nothing.
"""
