"""The options that belong to one table, declared once: a stream's into its table, each ``icesink.Target``'s and
those ``icesink.debezium`` gives the tables it creates."""

from __future__ import annotations

import datetime
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any


def doc(text: str) -> dict[str, str]:
    """A field's description, from which the docstring of ``icesink.stream`` and the reference are built."""
    return {"doc": text}


class Late(enum.StrEnum):
    """What a stream with ``event_time`` does with a row that arrives below the watermark."""

    WRITE = "write"  # written with the others, counted in icesink.late-rows
    DEAD_LETTER = "dead_letter"  # set aside in the stream's dead_letter table, counted all the same


class Writer(enum.StrEnum):
    """Who writes a stream's Parquet files."""

    AUTO = "auto"
    SPARK = "spark"
    ARROW = "arrow"


@dataclass(frozen=True, kw_only=True)
class TableOptions:
    """The options that belong to one table: a stream's into its table, each :class:`Target`'s, and the ones
    ``icesink.debezium`` gives the tables it creates. Declared here once: a new per-table option is a field
    here (with its description, which the docstring and the documentation's reference are built from) and an
    argument of ``icesink.stream``."""

    create_table: bool = field(
        default=False, metadata=doc("create the table from the DataFrame's schema if it does not exist.")
    )
    partition_by: Sequence[str] = field(
        default=(), metadata=doc('partition fields of a new table: ``"col"``, ``"day(ts)"``, ``"bucket(16, id)"``, ….')
    )
    table_properties: Mapping[str, str] | None = field(
        default=None,
        metadata=doc(
            "properties of a new table (``write.target-file-size-bytes``, ``icesink.maintain.*``, …); an existing "
            "table keeps its own. An ``icesink.*`` name icesink does not read (a typo) is refused, naming the nearest "
            "one it does, as are the names icesink writes itself."
        ),
    )
    equality_fields: Sequence[str] | None = field(
        default=None,
        metadata=doc(
            "the key of a change stream: every row replaces the table's row with the same key (upsert). Defaults "
            "to the table's identifier fields; a new table gets them as identifier fields."
        ),
    )
    op_column: str | None = field(
        default=None,
        metadata=doc(
            "CDC: the column holding each row's operation; ``op_values`` maps its values to "
            '``insert``/``update``/``delete`` (default ``{"I": "insert", "U": "update", "D": "delete"}``).'
        ),
    )
    op_values: Mapping[str, str] | None = field(default=None, metadata=doc("see ``op_column``."))
    sequence_by: str | None = field(
        default=None, metadata=doc("orders the changes of one key within a micro-batch; the last one wins.")
    )
    writer: Writer = field(
        default=Writer.AUTO,
        metadata=doc(
            'who writes the Parquet files. ``"auto"`` (default): Spark\'s own Parquet writer where it can do all '
            "the table asks (appends to an unpartitioned table on a file system path), icesink's Arrow writer "
            'elsewhere; ``"spark"``: Spark\'s writer or an error saying why not; ``"arrow"``: always icesink\'s '
            "Arrow writer (partition transforms, object stores, change streams, per-row checks)."
        ),
    )
    maintain: bool = field(
        default=False,
        metadata=doc(
            "with the inline committer, run the table's due maintenance (equality deletes left in the table "
            "become position deletes, small files are compacted) after commits, as ``icesink committer run "
            "--maintain`` does; the next micro-batch waits at most ``icesink.maintain.max-seconds`` plus one "
            "compaction group."
        ),
    )
    evolve_schema: bool = field(
        default=False,
        metadata=doc(
            "let the stream change the table's schema where the DataFrame no longer fits it and the change loses "
            "nothing: DataFrame columns the table lacks are added as optional columns, a wider type widens the "
            "column (int to long, float to double, a decimal's precision), a required column that receives nulls "
            "becomes optional. Each change is a metadata commit of its own, made before the checkpoint that needs "
            "it. Without it, each of these stops the stream with the column named. Renames, drops and narrowing "
            "are never made."
        ),
    )

    event_time: str | None = field(
        default=None,
        metadata=doc(
            "the column holding each row's event time (a timestamp or date; a column the table does not have is "
            "read and not written): the stream keeps a watermark, recorded in every snapshot as "
            "``icesink.watermark``, below which every row has arrived (see docs/completeness.md)."
        ),
    )
    lateness: str | datetime.timedelta | None = field(
        default=None,
        metadata=doc(
            'with ``event_time``: how late a row may arrive, e.g. ``"15 minutes"``; the watermark trails the '
            "latest event time by it. Default: none."
        ),
    )
    watermark_from: str | None = field(
        default=None,
        metadata=doc(
            "a column holding an upstream watermark, as ``_commit_watermark`` of "
            "``icesink.read_stream(..., with_watermark=True)``: the stream's watermark follows it (the largest value "
            "seen) instead of trailing ``event_time``, so completeness passes down a pipeline of tables. "
            "``event_time`` then names the column whose time partitions the watermark makes done and whose rows "
            "arriving below it are counted late. A column the table does not have is read and not written."
        ),
    )
    late: Late = field(
        default=Late.WRITE,
        metadata=doc(
            "with ``event_time``: what becomes of a row that arrives below the watermark its micro-batch started "
            'with. ``"write"`` (default): it is written with the others and counted in ``icesink.late-rows``; '
            '``"dead_letter"``: it goes to the stream\'s ``dead_letter`` table instead (counted all the same), as '
            "a row of JSON with its table, event time and the watermark it missed, in the same commit."
        ),
    )

    branch: str | None = field(
        default=None,
        metadata=doc(
            "commit every checkpoint to this branch of the table instead of ``main`` (created from ``main``'s head "
            "on first use): the job's exactly-once marker, its watermark and its partitions are the branch's, and "
            "``main`` does not move. With ``maintain``, maintenance commits to the branch too. With "
            "``expire_snapshots``, expiry keeps every snapshot between ``main`` and the branch's head."
        ),
    )
    audit: Sequence[Callable[..., list[str]]] = field(
        default=(),
        metadata=doc(
            "with ``branch``: checks every new branch snapshot must pass before ``main`` moves to it "
            "(write-audit-publish, see docs/write-audit-publish.md). Each is a callable given one argument with "
            "``.added`` (a ``pyarrow.Table`` of the rows the checkpoint added), ``.table``, ``.snapshot_id`` and "
            "``.checkpoint_id``, returning a list of problems as strings (empty: passed); ``icesink.checks`` has "
            "built-ins (``not_null``, ``unique``, ``in_range``, ``matches``, ``rows_written``, "
            "``schema_unchanged``). Run by the committer, inline or the daemon (which makes them again in its own "
            "process)."
        ),
    )

    def table_options(self) -> TableOptions:
        """These options alone (of a stream's options or a ``Target``)."""
        return TableOptions(**self.as_dict())

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in TABLE_OPTIONS}

    def given(self) -> list[str]:
        """The options set to something other than their default."""
        return [f.name for f in fields(TableOptions) if not _is_default(getattr(self, f.name), f.default)]


def _is_default(value: object, default: object) -> bool:
    """The default, or an empty list or dict where the default is none."""
    empty = isinstance(value, list | tuple | Mapping) and not value
    return value == default or (empty and default in ((), None))


# The options given per table (in a Target) when a stream writes several.
TABLE_OPTIONS = tuple(option.name for option in fields(TableOptions))


# What each kind of option takes, by its annotation: (check, said as, example).
_KINDS: dict[str, tuple[Callable[[object], bool], str, str]] = {
    "str": (lambda v: isinstance(v, str), "a string", "'name'"),
    "str | None": (lambda v: v is None or isinstance(v, str), "a string", "'name'"),
    "Sequence[str]": (
        lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) for x in v),
        "a list of strings",
        "['name']",
    ),
    "Sequence[str] | None": (
        lambda v: v is None or (isinstance(v, list | tuple) and all(isinstance(x, str) for x in v)),
        "a list of strings",
        "['name']",
    ),
    "Mapping[str, str] | None": (
        lambda v: (
            v is None
            or (
                isinstance(v, Mapping)
                and all(isinstance(k, str) and isinstance(x, str | int | float) for k, x in v.items())
            )
        ),
        "a dict of names to values",
        "{'name': 'value'}",
    ),
    "str | datetime.timedelta | None": (
        lambda v: v is None or isinstance(v, str | datetime.timedelta),
        "a duration",
        "'15 minutes'",
    ),
    "str | datetime.timedelta": (lambda v: isinstance(v, str | datetime.timedelta), "a duration", "'15 minutes'"),
    "Mapping[str, Any] | None": (
        lambda v: v is None or (isinstance(v, Mapping) and all(isinstance(k, str) for k in v)),
        "a dict",
        "{'processingTime': '10 seconds'}",
    ),
}


def refuse_wrong_types(options: object, where: str) -> None:
    """A :class:`ConfigError` naming ``where`` and the option whose value is not of the kind it takes (a string
    where a list is taken would be read as its characters; a list where a name is taken fails deep inside)."""
    from icesink.errors import ConfigError

    for option in fields(options):  # type: ignore[arg-type]
        kind = _KINDS.get(str(option.type))
        value = getattr(options, option.name)
        if kind is None or kind[0](value):
            continue
        _, said, example = kind
        given = f"the string {value!r}" if isinstance(value, str) else repr(value)
        if isinstance(value, str) and "list" in said:
            example = f"[{value!r}]"
        raise ConfigError(f"{where}: {option.name} takes {said}, e.g. {example}, not {given}")
