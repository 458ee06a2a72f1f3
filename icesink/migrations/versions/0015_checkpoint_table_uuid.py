"""The table a checkpoint was staged for, by its uuid.

A table dropped and created again under the same name (by another tool) is another table: checkpoints staged for
the first must not land in the second unasked. The committer compares the uuid a checkpoint was staged for with
the table's; rows staged before hold none and are committed as before.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("table_uuid", sa.String(36)))


def downgrade() -> None:
    # An earlier release commits a staged checkpoint to whatever table has its name now, as it always did.
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("table_uuid")
