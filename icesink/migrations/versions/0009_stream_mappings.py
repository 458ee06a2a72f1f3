"""The keys of a Debezium stream's ``tables=`` and ``partition_by`` options, and what each matched.

A key that never matches (a typo, a schema name left out) silently routes a source table to a default-named,
unpartitioned table. The stream records its keys here at its first micro-batch and, once, what each key first
matched, so that ``icesink tables mappings`` can list the ones that matched nothing.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "icesink_stream_mappings",
        sa.Column("catalog_name", sa.String(255), primary_key=True),
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("option", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(512), primary_key=True),
        sa.Column("target", sa.String(1000), nullable=False),
        sa.Column("matched", sa.String(1000), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    # Only a listing for operators: an earlier release neither writes nor reads it.
    op.drop_table("icesink_stream_mappings")
