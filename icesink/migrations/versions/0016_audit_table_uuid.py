"""The table an audit was of, by its uuid.

A table dropped and created again under the same name is another table: the audits of the first must not make
the second's branch look audited, nor give it the first's checks. Audits record the table's uuid; readers of a
branch's audits take those of the table as it is now, and gc forgets another table's. Rows recorded before take
the uuid of the ledger row of their checkpoint, where the ledger still has it; the rest hold none and are read
as before (as the table's).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_audits") as batch:
        batch.add_column(sa.Column("table_uuid", sa.String(36)))
    # An audit of a job's checkpoint was of the table the ledger staged that checkpoint for (its uuid since 0015).
    # Audits of other tools' snapshots, and of checkpoints whose ledger rows gc has pruned, stay without one.
    op.execute(
        """
        UPDATE icesink_audits SET table_uuid = (
            SELECT c.table_uuid FROM icesink_checkpoints c
            WHERE c.catalog_name = icesink_audits.catalog_name
              AND c.table_identifier = icesink_audits.table_identifier
              AND c.job_id = icesink_audits.job_id
              AND c.checkpoint_id = icesink_audits.checkpoint_id
              AND c.table_uuid IS NOT NULL
            LIMIT 1
        )
        WHERE job_id IS NOT NULL AND checkpoint_id IS NOT NULL
        """
    )


def downgrade() -> None:
    # An earlier release reads every audit recorded under a table's name as that table's, as it always did.
    with op.batch_alter_table("icesink_audits") as batch:
        batch.drop_column("table_uuid")
