"""Evaluating a pyiceberg row filter on rows in memory (the ``matches`` check of an audit)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema


class PredicateError(Exception):
    """The predicate does not parse, or names a column the schema lacks; the message says which."""


def rows_not_matching(rows: pa.Table, schema: Schema, predicate: str) -> list[int]:
    """Indices of the rows for which ``predicate`` is not true (false, or unknown because of a null)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.expressions.visitors import bind
    from pyiceberg.io.pyarrow import expression_to_pyarrow

    from icesink.iceberg.scan import parse_row_filter

    try:
        expression = parse_row_filter(predicate)
    except Exception as e:  # pyparsing's errors: the text is not a filter
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PredicateError(
            f'the predicate cannot be parsed ({first}); write it as a pyiceberg row filter, e.g. "amount >= 0"'
        ) from e
    try:
        bound = bind(schema, expression, case_sensitive=True)
    except (ValueError, TypeError) as e:
        raise PredicateError(
            f"the predicate does not fit the table ({e}); its columns are {', '.join(schema.column_names)}"
        ) from e
    if rows.num_rows == 0:
        return []
    import pyarrow.dataset as ds

    try:
        # The predicate evaluated as a column (one pass, vectorized), not a filter then a lookup of what it kept.
        truth = ds.dataset(rows).to_table(columns={"truth": expression_to_pyarrow(bound, schema)}).column("truth")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError) as e:
        raise PredicateError(f"the predicate cannot be evaluated on the rows ({e})") from e
    found: list[int] = pc.indices_nonzero(pc.invert(pc.fill_null(truth, False))).to_pylist()
    return found


def predicate_columns(schema: Schema, predicate: str) -> list[str] | None:
    """The top-level columns ``predicate`` reads (None when it does not parse or bind: the check says why)."""
    from pyiceberg.expressions.visitors import bind, extract_field_ids

    from icesink.iceberg.scan import parse_row_filter
    from icesink.iceberg.schemas import field_path

    try:
        bound = bind(schema, parse_row_filter(predicate), case_sensitive=True)
    except Exception:  # parse or bind errors: the check reports them with the rows
        return None
    return sorted({field_path(schema, field_id)[0][1] for field_id in extract_field_ids(bound)})
