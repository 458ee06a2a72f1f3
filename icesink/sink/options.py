"""What ``icesink.stream`` takes besides the DataFrame: typed, checked, and described once.

:class:`StreamOptions` is the single description of every option: ``icesink.stream``'s docstring and the
documentation's option reference are built from its fields, so an option cannot be documented twice or
left out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from icesink.errors import ConfigError
from icesink.properties import check_user_properties

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from icesink.catalog.config import CatalogConfig
    from icesink.debezium_events.stream_spec import Debezium


class Committer(enum.StrEnum):
    """Who commits a stream's checkpoints."""

    INLINE = "inline"  # the driver, after every micro-batch
    DAEMON = "daemon"  # `icesink committer run`; the stream only stages


class Writer(enum.StrEnum):
    """Who writes a stream's Parquet files."""

    AUTO = "auto"
    SPARK = "spark"
    ARROW = "arrow"


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class StreamOptions:
    """The options of one stream into one table."""

    table: str = field(metadata=_doc("``namespace.table`` in the catalog (or ``tables``, for several)."))
    checkpoint_location: str | None = field(
        default=None,
        metadata=_doc(
            "Spark's checkpoint directory; the job id is derived from it. Default: a directory under the "
            "session's ``spark.sql.streaming.checkpointLocation`` named after ``query_name``, else the table."
        ),
    )
    trigger: Mapping[str, Any] | None = field(
        default=None,
        metadata=_doc(
            'keyword arguments of ``DataStreamWriter.trigger``, e.g. ``{"processingTime": "10 seconds"}``, or '
            '``{"availableNow": True}`` to write what is there and stop. Default: Spark\'s, the next micro-batch '
            "as soon as the last one ends, for as long as the query runs."
        ),
    )
    create_table: bool = field(
        default=False, metadata=_doc("create the table from the DataFrame's schema if it does not exist.")
    )
    partition_by: Sequence[str] = field(
        default=(), metadata=_doc('partition fields of a new table: ``"col"``, ``"day(ts)"``, ``"bucket(16, id)"``, ….')
    )
    table_properties: Mapping[str, str] | None = field(
        default=None,
        metadata=_doc(
            "properties of a new table (``write.target-file-size-bytes``, ``icesink.maintain.*``, …); an existing "
            "table keeps its own. An ``icesink.*`` name icesink does not read (a typo) is refused, naming the nearest "
            "one it does, as are the names icesink writes itself."
        ),
    )
    job_id: str | None = field(
        default=None,
        metadata=_doc("a stable name for this writer; by default Spark's query id stored in the checkpoint."),
    )
    catalog: str | CatalogConfig | Mapping[str, str] | None = field(
        default=None,
        metadata=_doc(
            "catalog name, :class:`CatalogConfig` or properties; default: pyiceberg configuration, else the "
            "embedded SQLite catalog under ``./warehouse``."
        ),
    )
    committer: Committer = field(
        default=Committer.INLINE,
        metadata=_doc(
            '``"inline"`` commits from the driver after every batch; ``"daemon"`` only stages, leaving commits to '
            "``icesink committer run``."
        ),
    )
    query_name: str | None = field(default=None, metadata=_doc("Spark query name."))
    equality_fields: Sequence[str] | None = field(
        default=None,
        metadata=_doc(
            "the key of a change stream: every row replaces the table's row with the same key (upsert). Defaults "
            "to the table's identifier fields; a new table gets them as identifier fields."
        ),
    )
    op_column: str | None = field(
        default=None,
        metadata=_doc(
            "CDC: the column holding each row's operation; ``op_values`` maps its values to "
            '``insert``/``update``/``delete`` (default ``{"I": "insert", "U": "update", "D": "delete"}``).'
        ),
    )
    op_values: Mapping[str, str] | None = field(default=None, metadata=_doc("see ``op_column``."))
    sequence_by: str | None = field(
        default=None, metadata=_doc("orders the changes of one key within a micro-batch; the last one wins.")
    )
    expire_snapshots: bool = field(
        default=False,
        metadata=_doc(
            "with the inline committer, drop snapshots past the table's ``history.expire.*`` retention in every "
            "commit (as ``icesink committer run --expire-snapshots`` does)."
        ),
    )
    writer: Writer = field(
        default=Writer.AUTO,
        metadata=_doc(
            'who writes the Parquet files. ``"auto"`` (default): Spark\'s own Parquet writer where it can do all '
            "the table asks (appends to an unpartitioned table on a file system path), icesink's Arrow writer "
            'elsewhere; ``"spark"``: Spark\'s writer or an error saying why not; ``"arrow"``: always icesink\'s '
            "Arrow writer (partition transforms, object stores, change streams, per-row checks)."
        ),
    )
    maintain: bool = field(
        default=False,
        metadata=_doc(
            "with the inline committer, run the table's due maintenance (equality deletes left in the table "
            "become position deletes, small files are compacted) after commits, as ``icesink committer run "
            "--maintain`` does; the next micro-batch waits at most ``icesink.maintain.max-seconds`` plus one "
            "compaction group."
        ),
    )
    evolve_schema: bool = field(
        default=False,
        metadata=_doc(
            "let the stream change the table's schema where the DataFrame no longer fits it and the change loses "
            "nothing: DataFrame columns the table lacks are added as optional columns, a wider type widens the "
            "column (int to long, float to double, a decimal's precision), a required column that receives nulls "
            "becomes optional. Each change is a metadata commit of its own, made before the checkpoint that needs "
            "it. Without it, each of these stops the stream with the column named. Renames, drops and narrowing "
            "are never made."
        ),
    )

    tables: Mapping[str, Target] | Debezium | None = field(
        default=None,
        metadata=_doc(
            "instead of ``table``: several tables from one stream, one checkpoint and one job, "
            '``{"ns.orders": icesink.Target(select=..., equality_fields=[...]), ...}``. Each '
            ":class:`~icesink.Target` says which rows of a micro-batch go to its table and takes the options "
            "that belong to one table (``create_table``, ``partition_by``, ``table_properties``, "
            "``equality_fields``, ``op_column``, ``op_values``, ``sequence_by``, ``writer``, ``maintain``, "
            "``evolve_schema``); the others apply to the stream. ``tables=icesink.debezium(namespace)`` routes "
            "Debezium change events to one table per source table, created as they come."
        ),
    )
    atomic: bool = field(
        default=True,
        metadata=_doc(
            "with ``tables=``: every table a micro-batch touches moves to its new snapshot in one transaction of "
            "the catalog database, or none does, so a reader of the catalog sees all of them at the same "
            "checkpoint; a table whose checkpoint cannot commit holds back the others. ``False`` commits each "
            "table on its own."
        ),
    )

    def __post_init__(self) -> None:
        table = self.table
        object.__setattr__(self, "committer", _member(Committer, self.committer, table, "committer"))
        object.__setattr__(self, "writer", _member(Writer, self.writer, table, "writer"))
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        check_user_properties(self.table_properties, f"table {table}")
        for option in ("create_table", "maintain", "evolve_schema", "expire_snapshots", "atomic"):
            if not isinstance(getattr(self, option), bool):
                raise ConfigError(f"table {table}: {option} must be True or False, not {getattr(self, option)!r}")
        for option, flag in (("maintain", self.maintain), ("expire_snapshots", self.expire_snapshots)):
            if flag and self.committer != Committer.INLINE:
                raise ConfigError(
                    f"table {table}: {option} applies to the inline committer; with committer='daemon' "
                    f"pass --{option.replace('_', '-')} to icesink committer run"
                )

    @classmethod
    def default_of(cls, name: str) -> Any:
        """The default of one option."""
        (option,) = (f for f in fields(cls) if f.name == name)
        return option.default

    @classmethod
    def reference(cls) -> list[tuple[str, str, str]]:
        """(option, default, meaning) of every option, for the documentation."""
        rows = []
        for option in fields(cls):
            value = option.default.value if isinstance(option.default, enum.Enum) else option.default
            default = "required (or tables)" if option.name == "table" else repr(value)
            rows.append((option.name, default, option.metadata["doc"]))
        return rows


# The options that belong to one table: given per table (in a Target) when a stream writes several.
TABLE_OPTIONS = (
    "create_table",
    "partition_by",
    "table_properties",
    "equality_fields",
    "op_column",
    "op_values",
    "sequence_by",
    "writer",
    "maintain",
    "evolve_schema",
)


@dataclass(frozen=True)
class Target:
    """One table of a stream that writes several: ``icesink.stream(df, tables={"ns.t": icesink.Target(...)})``.

    ``select`` makes the table's rows out of each micro-batch, e.g. ``lambda df: df.where(...).select(...)``;
    without it the table gets the whole micro-batch. It must be a DataFrame transformation without
    actions: it is also applied to the streaming DataFrame, to check the table's fit before the stream
    starts. The other options mean what they mean for a stream into one table.
    """

    select: Callable[[DataFrame], DataFrame] | None = None
    create_table: bool = False
    partition_by: Sequence[str] = ()
    table_properties: Mapping[str, str] | None = None
    equality_fields: Sequence[str] | None = None
    op_column: str | None = None
    op_values: Mapping[str, str] | None = None
    sequence_by: str | None = None
    writer: Writer | str = Writer.AUTO
    maintain: bool = False
    evolve_schema: bool = False

    def options(self) -> dict[str, Any]:
        """The table's options, as :class:`StreamOptions` takes them."""
        return {name: getattr(self, name) for name in TABLE_OPTIONS}


def _member(kind: type[enum.StrEnum], value: object, table: str, option: str) -> Any:
    allowed = tuple(m.value for m in kind)
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"table {table}: {option} must be one of {allowed}, not {value!r}")
    return kind(value)


def args_doc() -> str:
    """The ``Args:`` section of ``icesink.stream``'s docstring, from the options' own descriptions."""
    import textwrap

    lines = ["    Args:", "        df: a streaming DataFrame whose columns fit the table."]
    for name, _, doc in StreamOptions.reference():
        lines += textwrap.wrap(f"{name}: {doc}", 110, initial_indent=" " * 8, subsequent_indent=" " * 12)
    return "\n".join(lines)
