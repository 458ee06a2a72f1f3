"""Committer leases: one active committer per scope, fenced by an epoch.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "icesink_committer_leases",
        sa.Column("catalog_name", sa.String(255), primary_key=True),
        sa.Column("scope", sa.String(511), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("icesink_committer_leases")
