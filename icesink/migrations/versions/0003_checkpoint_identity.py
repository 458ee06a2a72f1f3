"""What identifies a staged checkpoint: the stream that wrote it, its checkpoint location, its schema.

A job id may be reused by mistake (two streams, or a stream restarted from a
new checkpoint location with an explicit job id); recording the stream
(Spark's query id, kept in the checkpoint location) lets the writer and the
committer tell a replay of the same micro-batch from another stream's one.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("stream_id", sa.String(255), nullable=True))
        batch.add_column(sa.Column("checkpoint_location", sa.String(1000), nullable=True))
        batch.add_column(sa.Column("schema_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("schema_id")
        batch.drop_column("checkpoint_location")
        batch.drop_column("stream_id")
