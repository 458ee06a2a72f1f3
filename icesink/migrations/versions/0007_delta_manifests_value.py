"""A checkpoint's delta manifests as one versioned value.

The eight columns of the pair (``data_manifest``, ``data_manifest_length``,
``data_files``, ``data_records`` and the same four of ``delete_``) become one
``delta_manifests`` column of versioned JSON, so that a later release can add
to what a checkpoint stages (several manifests of a kind, say) without another
column per field. Rows staged by an earlier release are rewritten into
version 1 here, in chunks, so nothing staged is lost; a downgrade writes them
back into the eight columns.

The encoding below is frozen at version 1 on purpose: this migration must
keep producing what version 1 readers read, whatever the code does later.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

from icesink.errors import LedgerFormatError

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_CHUNK = 5000
_PATH_LENGTH = 1000  # revision 0006's manifest path columns
_KINDS = (("data", "data"), ("delete", "deletes"))  # column prefix, content in the encoding
_FLAT = [f"{prefix}_{field}" for prefix, _ in _KINDS for field in ("manifest", "manifest_length", "files", "records")]

_checkpoints = sa.table(
    "icesink_checkpoints",
    sa.column("id", sa.BigInteger()),
    sa.column("delta_manifests", sa.Text()),
    sa.column("table_identifier", sa.String()),
    sa.column("job_id", sa.String()),
    sa.column("checkpoint_id", sa.BigInteger()),
    *(sa.column(name) for name in _FLAT),
)


def _encode_v1(row: Any) -> str:
    manifests = [
        {
            "content": content,
            "path": row[f"{prefix}_manifest"],
            "length": int(row[f"{prefix}_manifest_length"] or 0),
            "files": int(row[f"{prefix}_files"]),
            "records": int(row[f"{prefix}_records"]),
        }
        for prefix, content in _KINDS
        if row[f"{prefix}_manifest"] is not None
    ]
    return json.dumps({"version": 1, "manifests": manifests}, separators=(",", ":"))


def _decode_v1(row: Any) -> dict[str, Any]:
    """The eight columns of a version-1 value; :class:`LedgerFormatError` for a row revision 0006 cannot hold."""
    where = f"checkpoint {row['checkpoint_id']} of job {row['job_id']!r} for table {row['table_identifier']!r}"
    try:
        body = json.loads(row["delta_manifests"])
        version = body["version"]
        manifests = {m["content"]: m for m in body["manifests"]}
        if version != 1 or set(manifests) - {c for _, c in _KINDS} or len(manifests) != len(body["manifests"]):
            raise ValueError(f"encoding version {version} with manifests {sorted(manifests)}")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise LedgerFormatError(
            f"{where} holds delta manifests revision 0006 cannot hold ({e}); commit or discard it with the release "
            "that staged it before downgrading"
        ) from e
    flat: dict[str, Any] = {}
    for prefix, content in _KINDS:
        manifest = manifests.get(content)
        if manifest is not None and len(manifest["path"]) > _PATH_LENGTH:
            raise LedgerFormatError(
                f"{where}: its {content} manifest's path is longer than revision 0006's {_PATH_LENGTH} characters; "
                "commit it before downgrading"
            )
        flat[f"{prefix}_manifest"] = manifest["path"] if manifest else None
        flat[f"{prefix}_manifest_length"] = manifest["length"] if manifest else None
        flat[f"{prefix}_files"] = manifest["files"] if manifest else 0
        flat[f"{prefix}_records"] = manifest["records"] if manifest else 0
    return flat


def _chunks(*columns: sa.ColumnElement[Any]) -> Iterator[list[Any]]:
    """Every ledger row's id and ``columns``, ``_CHUNK`` rows at a time, by id (memory bounded on large ledgers)."""
    bind = op.get_bind()
    last = None
    while True:
        query = sa.select(_checkpoints.c.id, *columns).order_by(_checkpoints.c.id).limit(_CHUNK)
        if last is not None:
            query = query.where(_checkpoints.c.id > last)
        rows = [r._mapping for r in bind.execute(query)]
        if not rows:
            return
        yield rows
        last = rows[-1]["id"]


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("delta_manifests", sa.Text(), nullable=True))
    update = (
        _checkpoints.update()
        .where(_checkpoints.c.id == sa.bindparam("row_id"))
        .values(delta_manifests=sa.bindparam("encoded"))
    )
    for rows in _chunks(*(_checkpoints.c[name] for name in _FLAT)):
        op.get_bind().execute(update, [{"row_id": r["id"], "encoded": _encode_v1(r)} for r in rows])
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.alter_column("delta_manifests", existing_type=sa.Text(), nullable=False)
        for name in _FLAT:
            batch.drop_column(name)


def downgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        for prefix, _ in _KINDS:
            batch.add_column(sa.Column(f"{prefix}_manifest", sa.String(1000), nullable=True))
            batch.add_column(sa.Column(f"{prefix}_manifest_length", sa.BigInteger(), nullable=True))
            batch.add_column(sa.Column(f"{prefix}_files", sa.Integer(), nullable=False, server_default="0"))
            batch.add_column(sa.Column(f"{prefix}_records", sa.BigInteger(), nullable=False, server_default="0"))
    update = (
        _checkpoints.update()
        .where(_checkpoints.c.id == sa.bindparam("row_id"))
        .values({name: sa.bindparam(f"new_{name}") for name in _FLAT})
    )
    c = _checkpoints.c
    for rows in _chunks(c.delta_manifests, c.table_identifier, c.job_id, c.checkpoint_id):
        values = [{"row_id": r["id"], **{f"new_{k}": v for k, v in _decode_v1(r).items()}} for r in rows]
        op.get_bind().execute(update, values)
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("delta_manifests")
