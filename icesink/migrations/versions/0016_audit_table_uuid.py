"""The table an audit was of, by its uuid.

A table dropped and created again under the same name is another table: the audits of the first must not make
the second's branch look audited, nor give it the first's checks. Audits record the table's uuid; readers of a
branch's audits take those of the table as it is now, and gc forgets another table's. Rows recorded before hold
none and are read as before.

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


def downgrade() -> None:
    # An earlier release reads every audit recorded under a table's name as that table's, as it always did.
    with op.batch_alter_table("icesink_audits") as batch:
        batch.drop_column("table_uuid")
