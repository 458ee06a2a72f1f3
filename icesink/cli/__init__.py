"""The ``icesink`` command line: catalog database, tables, snapshots, checkpoints and the committer.

One module per group of commands (:mod:`~icesink.cli.catalog_commands`,
:mod:`~icesink.cli.checkpoint_commands`, :mod:`~icesink.cli.committer_commands`), put together in
:mod:`~icesink.cli.app`; every command prints through :mod:`~icesink.cli.output`.
"""

from icesink.cli.app import main
from icesink.cli.output import json_value

__all__ = ["json_value", "main"]
