"""Tables a stream has created that no reader may see yet.

A stream into several tables creates a table the first time a micro-batch
routes rows to it. Inserted into ``iceberg_tables`` at once, the table would
appear empty to every reader until its first checkpoint commits. Instead, its
first metadata file is written and named here; icesink's own writers and
committers find it here, and the commit of its first snapshot inserts the
catalog's row and deletes this one in one transaction (with the other tables
of the checkpoint, when they commit atomically).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from icesink.errors import ConfigError

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "icesink_pending_tables",
        sa.Column("catalog_name", sa.String(255), primary_key=True),
        sa.Column("table_namespace", sa.String(255), primary_key=True),
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("metadata_location", sa.String(1000), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    # An earlier release knows no pending table: the checkpoints staged for one could never commit.
    pending = op.get_bind().execute(
        sa.text("SELECT catalog_name, table_namespace, table_name FROM icesink_pending_tables")
    )
    names = sorted(f"{namespace}.{name} ({catalog})" for catalog, namespace, name in pending)
    if names:
        raise ConfigError(
            f"tables {', '.join(names)} were created by a stream and wait for their first commit, which an "
            "earlier release cannot make; let their committer commit them (or, for a stream given up, discard their "
            "checkpoints and `icesink tables drop-pending` them), then downgrade"
        )
    op.drop_table("icesink_pending_tables")
