"""The table a stream declared publishing for, by its uuid.

A table dropped and created again under the same name is another table: what a stream declared for the committer
daemon (its checks, its policy) was of the first, and must not audit or publish the second. Declarations record
the table's uuid; the daemon forgets a job's declaration once the table of the name is another, and
``recorded_checks`` passes over it. Rows declared before take the uuid of their job's newest checkpoint of the
table in the ledger, where it has one; the rest hold none and are read as before (as the table's).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_publishing") as batch:
        batch.add_column(sa.Column("table_uuid", sa.String(36)))
    # A stream declares when it meets its tables, before it stages a checkpoint of them: its newest ledger row
    # of the table was staged for the table it declared (or a later one of the name, that it then wrote to).
    op.execute(
        """
        UPDATE icesink_publishing SET table_uuid = (
            SELECT c.table_uuid FROM icesink_checkpoints c
            WHERE c.catalog_name = icesink_publishing.catalog_name
              AND c.table_identifier = icesink_publishing.table_identifier
              AND c.job_id = icesink_publishing.job_id
              AND c.table_uuid IS NOT NULL
            ORDER BY c.checkpoint_id DESC
            LIMIT 1
        )
        """
    )


def downgrade() -> None:
    # An earlier release reads every declaration of a table's name as that table's, as it always did.
    with op.batch_alter_table("icesink_publishing") as batch:
        batch.drop_column("table_uuid")
