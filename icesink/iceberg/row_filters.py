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
    numbered = rows.append_column("__icesink_row", pa.array(range(rows.num_rows), type=pa.int64()))
    try:
        kept = numbered.filter(expression_to_pyarrow(bound, schema)).column("__icesink_row")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError) as e:
        raise PredicateError(f"the predicate cannot be evaluated on the rows ({e})") from e
    true_rows = pc.is_in(numbered.column("__icesink_row"), value_set=kept.combine_chunks())
    found: list[int] = pc.indices_nonzero(pc.invert(true_rows)).to_pylist()
    return found
