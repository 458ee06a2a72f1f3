"""The audit record: each branch snapshot's audit outcome, and when it was published to main.

Written by the committer of a stream into a branch with ``audit=[...]`` (write-audit-publish): one row per
snapshot audited, saying what it was compared with (its parent, or main after a failure), whether the checks
passed and which problems they found. Publishing marks the snapshot main moved to in the same transaction as
the move. ``icesink branches`` lists it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "icesink_audits",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("catalog_name", sa.String(255), nullable=False),
        sa.Column("table_identifier", sa.String(511), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("base_snapshot_id", sa.BigInteger()),
        sa.Column("job_id", sa.String(255)),
        sa.Column("checkpoint_id", sa.BigInteger()),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("rows_checked", sa.BigInteger(), nullable=False),
        sa.Column("problems", sa.Text(), nullable=False),
        sa.Column("checks", sa.Text(), nullable=False),
        sa.Column("audited_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True)),
        sa.Column("published_by", sa.String(255)),
    )
    op.create_index(
        "icesink_audits_snapshot",
        "icesink_audits",
        ["catalog_name", "table_identifier", "branch", "snapshot_id"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("icesink_audits_snapshot", table_name="icesink_audits")
    op.drop_table("icesink_audits")
