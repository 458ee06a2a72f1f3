"""Where each table field's values are in rows given as JSON objects (a Debezium stream's rows)."""

from __future__ import annotations

from collections.abc import Sequence

from icesink.sink.projection import SAME, Projection, ValuePlan
from icesink.writer.json_rows import JsonNames
from icesink.writer.spec import ColumnSpec


def json_names(projection: Projection, columns: Sequence[ColumnSpec]) -> JsonNames:
    """Where each table field's values are in rows given as JSON objects keyed by the DataFrame's names: the
    projection's matches (a renamed or re-cased field, a field the rows lack), at any depth."""
    keys: list[tuple[int, str | None]] = []

    def walk(spec: ColumnSpec, source: str | None, plan: ValuePlan) -> None:
        if source != spec.name:
            keys.append((spec.field_id, source))
        if source is None or plan.kind == "null":
            return
        if spec.iceberg_type == "struct":
            by_name = {c.name: c for c in spec.children}
            if plan.kind == "struct":
                for name, field_source, field_plan in plan.fields:
                    walk(by_name[name], field_source, field_plan)
            else:
                for child in spec.children:
                    walk(child, child.name, SAME)
        elif spec.iceberg_type == "list":
            walk(spec.children[0], spec.children[0].name, plan.element or SAME)
        elif spec.iceberg_type == "map":
            walk(spec.children[0], spec.children[0].name, plan.key or SAME)
            walk(spec.children[1], spec.children[1].name, plan.element or SAME)

    for spec, source in zip(columns, projection.columns, strict=True):
        walk(spec, source.source, source.plan)
    return JsonNames(tuple(keys))
