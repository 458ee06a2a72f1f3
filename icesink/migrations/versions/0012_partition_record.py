"""The partition record: each time partition's state (open, done, changed after done) per table and branch.

Kept by the committer from the table's own history (the snapshots' added files and watermarks), so it can be
dropped and rebuilt; ``icesink partitions`` lists it. A second table says up to which snapshot of each branch the
record is kept.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "icesink_partitions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("catalog_name", sa.String(255), nullable=False),
        sa.Column("table_identifier", sa.String(511), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("spec_id", sa.Integer(), nullable=False),
        sa.Column("partition_key", sa.Text(), nullable=False),
        sa.Column("partition_path", sa.Text(), nullable=False),
        sa.Column("end_micros", sa.BigInteger()),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("row_count", sa.BigInteger(), nullable=False),
        sa.Column("rows_after_done", sa.BigInteger(), nullable=False),
        sa.Column("first_snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("last_snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_snapshot_id", sa.BigInteger()),
        sa.Column("done_watermark", sa.String(64)),
        sa.Column("done_at", sa.DateTime(timezone=True)),
        sa.Column("actions_at", sa.DateTime(timezone=True)),
    )
    op.create_index(
        "icesink_partitions_key",
        "icesink_partitions",
        ["catalog_name", "table_identifier", "branch", "spec_id", "partition_key"],
        unique=True,
    )
    op.create_table(
        "icesink_partition_progress",
        sa.Column("catalog_name", sa.String(255), primary_key=True),
        sa.Column("table_identifier", sa.String(511), primary_key=True),
        sa.Column("branch", sa.String(255), primary_key=True),
        sa.Column("snapshot_id", sa.BigInteger()),
        sa.Column("event_field_id", sa.Integer()),
        sa.Column("watermark_micros", sa.BigInteger()),
    )


def downgrade() -> None:
    # A record kept from the tables' own history: dropping it loses nothing a later upgrade cannot rebuild.
    op.drop_table("icesink_partition_progress")
    op.drop_index("icesink_partitions_key", table_name="icesink_partitions")
    op.drop_table("icesink_partitions")
