"""Keeping tables fast to read: equality deletes turned into position deletes, small files compacted.

Run by the committer between its commits (``committer run --maintain``,
``icesink.stream(..., maintain=True)``) or by an operator (``icesink
maintain``). Every maintenance commit is built on a known snapshot, checked
against what was committed since (as Iceberg's ``RewriteFiles`` does), and
swapped in by the catalog's compare-and-swap; it carries
``icesink.maintenance`` in its summary and never moves a job's marker.
"""
