"""Manifest merging: the manifest list stays short however many commits came before."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table import Table, TableProperties

from icesink.iceberg.manifests import fetch_entries, manifest_writer


@dataclass(frozen=True)
class ManifestMergePolicy:
    """Iceberg's manifest merging table properties, with Iceberg Java's defaults (merging on)."""

    enabled: bool
    min_count: int
    target_bytes: int

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> ManifestMergePolicy:
        return cls(
            enabled=properties.get(TableProperties.MANIFEST_MERGE_ENABLED, "true").lower() == "true",
            min_count=int(
                properties.get(
                    TableProperties.MANIFEST_MIN_MERGE_COUNT, TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT
                )
            ),
            target_bytes=int(
                properties.get(
                    TableProperties.MANIFEST_TARGET_SIZE_BYTES, TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
                )
            ),
        )


def merge_manifests(
    table: Table,
    existing: list[ManifestFile],
    new: list[ManifestFile],
    snapshot_id: int,
    policy: ManifestMergePolicy,
    commit_uuid: uuid.UUID,
) -> tuple[list[ManifestFile], list[str]]:
    """The parent's manifests, with small ones of the same content and spec rewritten as one.

    A group is merged once it and the new manifests of its kind reach
    ``min_count``; manifests at the target size stay as they are. Live entries
    are rewritten as EXISTING with their snapshot id and sequence numbers, so
    equality deletes keep applying exactly to the rows they applied to before.
    Returns the manifests to list and the paths of the ones written.
    """
    if not policy.enabled:
        return existing, []
    groups: dict[tuple[ManifestContent, int], list[ManifestFile]] = {}
    for manifest in existing:
        if manifest.manifest_length < policy.target_bytes:
            groups.setdefault((manifest.content, manifest.partition_spec_id), []).append(manifest)
    new_counts: dict[tuple[ManifestContent, int], int] = {}
    for manifest in new:
        key = (manifest.content, manifest.partition_spec_id)
        new_counts[key] = new_counts.get(key, 0) + 1
    metadata = table.metadata
    merged: list[ManifestFile] = []
    replaced: set[str] = set()
    written: list[str] = []
    for (content, spec_id), group in groups.items():
        if len(group) < 2 or len(group) + new_counts.get((content, spec_id), 0) < policy.min_count:
            continue
        path = table.location_provider().new_metadata_location(f"{commit_uuid}-merged{len(written)}.avro")
        written.append(path)
        deletes = content == ManifestContent.DELETES
        writer = manifest_writer(metadata, metadata.specs()[spec_id], table.io.new_output(path), snapshot_id, deletes)
        with writer:
            for manifest in group:
                for entry in fetch_entries(table.io, manifest):
                    writer.existing(entry)
        merged.append(writer.to_manifest_file())
        replaced.update(m.manifest_path for m in group)
    return merged + [m for m in existing if m.manifest_path not in replaced], written
