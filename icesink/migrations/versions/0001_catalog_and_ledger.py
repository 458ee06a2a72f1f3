"""pyiceberg's SQL catalog tables and icesink's checkpoint ledger.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    # A database that pyiceberg already initialised keeps its catalog tables.
    if "iceberg_tables" not in existing:
        op.create_table(
            "iceberg_tables",
            sa.Column("catalog_name", sa.String(255), primary_key=True),
            sa.Column("table_namespace", sa.String(255), primary_key=True),
            sa.Column("table_name", sa.String(255), primary_key=True),
            sa.Column("metadata_location", sa.String(1000), nullable=True),
            sa.Column("previous_metadata_location", sa.String(1000), nullable=True),
            sa.Column("iceberg_type", sa.String(5), nullable=True),
        )
    if "iceberg_namespace_properties" not in existing:
        op.create_table(
            "iceberg_namespace_properties",
            sa.Column("catalog_name", sa.String(255), primary_key=True),
            sa.Column("namespace", sa.String(255), primary_key=True),
            sa.Column("property_key", sa.String(255), primary_key=True),
            sa.Column("property_value", sa.String(1000), nullable=False),
        )
    op.create_table(
        "icesink_checkpoints",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("catalog_name", sa.String(255), nullable=False),
        sa.Column("table_identifier", sa.String(511), nullable=False),
        sa.Column("job_id", sa.String(255), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec_id", sa.Integer(), nullable=False),
        sa.Column("data_manifest", sa.String(1000), nullable=True),
        sa.Column("data_manifest_length", sa.BigInteger(), nullable=True),
        sa.Column("delete_manifest", sa.String(1000), nullable=True),
        sa.Column("delete_manifest_length", sa.BigInteger(), nullable=True),
        sa.Column("data_files", sa.Integer(), nullable=False),
        sa.Column("data_records", sa.BigInteger(), nullable=False),
        sa.Column("delete_files", sa.Integer(), nullable=False),
        sa.Column("delete_records", sa.BigInteger(), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("staged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("manifests_deleted", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("error", sa.Text(), nullable=True),
        sa.UniqueConstraint(
            "catalog_name", "table_identifier", "job_id", "checkpoint_id", name="uq_icesink_checkpoint"
        ),
    )
    op.create_index(
        "ix_icesink_checkpoints_pending", "icesink_checkpoints", ["catalog_name", "state", "table_identifier"]
    )


def downgrade() -> None:
    op.drop_index("ix_icesink_checkpoints_pending", table_name="icesink_checkpoints")
    op.drop_table("icesink_checkpoints")
