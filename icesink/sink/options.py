"""What ``icesink.stream`` takes besides the DataFrame: typed, checked, and described once.

:class:`StreamOptions` is the single description of every option: ``icesink.stream``'s docstring and the
documentation's option reference are built from its fields, so an option cannot be documented twice or
left out.
"""

from __future__ import annotations

import datetime
import enum
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from icesink.audit.publish_policy import PublishSettings
from icesink.audit.running import describe_check, import_check
from icesink.completeness.durations import DurationError, duration_micros
from icesink.errors import ConfigError
from icesink.properties import check_user_properties
from icesink.table_options import TABLE_OPTIONS, Late, TableOptions, Writer, doc, refuse_wrong_types
from icesink.table_ref import MAIN_BRANCH

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from icesink.catalog.config import CatalogConfig
    from icesink.debezium_events.stream_spec import Debezium


class Committer(enum.StrEnum):
    """Who commits a stream's checkpoints."""

    INLINE = "inline"  # the driver, after every micro-batch
    DAEMON = "daemon"  # `icesink committer run`; the stream only stages


@dataclass(frozen=True, kw_only=True)
class StreamWideOptions:
    """The options of the stream itself, whatever tables it writes."""

    checkpoint_location: str | None = field(
        default=None,
        metadata=doc(
            "Spark's checkpoint directory; the job id is derived from it. Default: a directory under the "
            "session's ``spark.sql.streaming.checkpointLocation`` named after ``query_name``, else the table."
        ),
    )
    trigger: Mapping[str, Any] | None = field(
        default=None,
        metadata=doc(
            'keyword arguments of ``DataStreamWriter.trigger``, e.g. ``{"processingTime": "10 seconds"}``, or '
            '``{"availableNow": True}`` to write what is there and stop. Default: Spark\'s, the next micro-batch '
            "as soon as the last one ends, for as long as the query runs."
        ),
    )
    job_id: str | None = field(
        default=None,
        metadata=doc("a stable name for this writer; by default Spark's query id stored in the checkpoint."),
    )
    catalog: str | CatalogConfig | Mapping[str, str] | None = field(
        default=None,
        metadata=doc(
            "catalog name, :class:`CatalogConfig` or properties; default: pyiceberg configuration, else the "
            "embedded SQLite catalog under ``./warehouse``."
        ),
    )
    committer: Committer = field(
        default=Committer.INLINE,
        metadata=doc(
            '``"inline"`` commits from the driver after every batch; ``"daemon"`` only stages, leaving commits to '
            "``icesink committer run``."
        ),
    )
    query_name: str | None = field(default=None, metadata=doc("Spark query name."))
    expire_snapshots: bool = field(
        default=False,
        metadata=doc(
            "with the inline committer, drop snapshots past the table's ``history.expire.*`` retention in every "
            "commit (as ``icesink committer run --expire-snapshots`` does)."
        ),
    )
    atomic: bool = field(
        default=True,
        metadata=doc(
            "with ``tables=``: every table a micro-batch touches moves to its new snapshot in one transaction of "
            "the catalog database, or none does, so a reader of the catalog sees all of them at the same "
            "checkpoint; a table whose checkpoint cannot commit holds back the others. ``False`` commits each "
            "table on its own."
        ),
    )

    split_by: Sequence[str] | None = field(
        default=None,
        metadata=doc(
            "with ``event_time``: the columns whose values are the splits of the input, each with its own "
            "watermark (the stream's is the lowest of the splits that are not idle). Default: ``topic`` and "
            "``partition`` when the DataFrame has both (Spark's Kafka source), else one split; ``[]``: one split."
        ),
    )
    idle_timeout: str | datetime.timedelta = field(
        default="5 minutes",
        metadata=doc(
            "with ``event_time``: a split without rows for this long (by the driver's clock) stops holding the "
            "watermark back until it has rows again."
        ),
    )
    dead_letter: str | None = field(
        default=None,
        metadata=doc(
            'with ``late="dead_letter"``: the table (``namespace.table``) that takes the late rows of every '
            "table of the stream, created if missing; its rows are committed in the same catalog transaction as "
            "the rows on time. (A Debezium stream names its own in ``icesink.debezium(dead_letter=...)``.)"
        ),
    )

    on_partition_done: Callable[[dict[str, object]], None] | None = field(
        default=None,
        metadata=doc(
            "with ``event_time`` and the inline committer: called after a commit with each time partition it made "
            "done (a dict: ``table``, ``branch``, ``partition``, ``watermark``, ``snapshot_id``, ``done_at``), at "
            "least once: an exception is logged and the call made again after the table's next commit, and every 30 "
            "seconds by a thread of the driver until it passes."
        ),
    )

    publish: str | datetime.timedelta | None = field(
        default=None,
        metadata=doc(
            'with ``branch``: when ``main`` follows the branch. ``"checkpoint"``: after every audited checkpoint '
            '(the default with ``audit``); a duration such as ``"1 minute"``: at most that often; '
            '``"partition-done"``: when a commit makes a time partition done; ``"manual"`` (the default '
            "without ``audit``): only ``icesink publish``. ``main`` moves to the newest audited snapshot, never "
            "past it; the tables of an atomic stream move together, in one transaction."
        ),
    )
    on_audit_failure: str = field(
        default="continue",
        metadata=doc(
            'with ``audit``: ``"continue"`` keeps writing to the branch while publishing stops until a snapshot '
            'passes on everything it adds over ``main``; ``"stop"`` stops the stream with the failure.'
        ),
    )

    def joined(self, table: str, per_table: TableOptions, **changed: Any) -> StreamOptions:
        """The options of a stream into ``table`` with these and ``per_table`` (``changed`` replacing some)."""
        wide = {f.name: getattr(self, f.name) for f in fields(StreamWideOptions)}
        return StreamOptions(table=table, **{**wide, **per_table.as_dict(), **changed})

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(StreamWideOptions)]


@dataclass(frozen=True, kw_only=True)
class StreamOptions(TableOptions, StreamWideOptions):
    """The options of one stream into one table: the stream's own and its table's."""

    table: str = field(metadata=doc("``namespace.table`` in the catalog (or ``tables``, for several)."))
    tables: Mapping[str, Target] | Debezium | None = field(
        default=None,
        metadata=doc(
            "instead of ``table``: several tables from one stream, one checkpoint and one job, "
            '``{"ns.orders": icesink.Target(select=..., equality_fields=[...]), ...}``. Each '
            ":class:`~icesink.Target` says which rows of a micro-batch go to its table and takes the options "
            f"that belong to one table ({', '.join(f'``{name}``' for name in TABLE_OPTIONS)}); the others apply "
            "to the stream. ``tables=icesink.debezium(namespace)`` routes "
            "Debezium change events to one table per source table, created as they come."
        ),
    )

    def __post_init__(self) -> None:
        table = self.table
        if not isinstance(table, str):
            raise ConfigError(f"icesink.stream: table takes a table name 'namespace.table', not {table!r}")
        try:
            refuse_wrong_types(self, f"table {table}")
            self._check(table)
        except ConfigError as e:
            e.located(table)
            raise

    def _check(self, table: str) -> None:
        if not (self.catalog is None or isinstance(self.catalog, str | Mapping) or hasattr(self.catalog, "uri")):
            raise ConfigError(
                f"table {table}: catalog takes a catalog name, a CatalogConfig or a dict of properties, "
                f"not {self.catalog!r}"
            )
        object.__setattr__(self, "committer", _member(Committer, self.committer, table, "committer"))
        object.__setattr__(self, "writer", _member(Writer, self.writer, table, "writer"))
        object.__setattr__(self, "late", _member(Late, self.late, table, "late"))
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        check_user_properties(self.table_properties, f"table {table}")
        for option in (f.name for f in fields(self) if isinstance(f.default, bool)):
            if not isinstance(getattr(self, option), bool):
                raise ConfigError(f"table {table}: {option} must be True or False, not {getattr(self, option)!r}")
        self._check_event_time(table)
        self._check_branch(table)
        self._check_audit(table)
        if self.on_partition_done is not None and not callable(self.on_partition_done):
            raise ConfigError(f"table {table}: on_partition_done takes a function, not {self.on_partition_done!r}")
        if self.on_partition_done is not None and self.committer != Committer.INLINE:
            raise ConfigError(
                f"table {table}: on_partition_done is called by the inline committer; with committer='daemon' set "
                "the table properties icesink.partition-done.http-post or icesink.partition-done.success-file"
            )
        for option, flag in (("maintain", self.maintain), ("expire_snapshots", self.expire_snapshots)):
            if flag and self.committer != Committer.INLINE:
                raise ConfigError(
                    f"table {table}: {option} applies to the inline committer; with committer='daemon' "
                    f"pass --{option.replace('_', '-')} to icesink committer run"
                )

    def _check_branch(self, table: str) -> None:
        if self.branch is None:
            return
        if not self.branch.strip():
            raise ConfigError(f"table {table}: branch names a branch of the table; it is empty")

    def _check_audit(self, table: str) -> None:
        audit = self.audit
        checks_given = isinstance(audit, list | tuple) and all(callable(c) and not isinstance(c, type) for c in audit)
        if isinstance(audit, str) or not checks_given:
            raise ConfigError(
                f"table {table}: audit takes a list of checks (callables such as icesink.checks.not_null('id')), "
                f"not {audit!r}"
            )
        object.__setattr__(self, "audit", tuple(audit))
        on_branch = self.branch is not None and self.branch != MAIN_BRANCH
        for option, given in (("audit", bool(audit)), ("publish", self.publish is not None)):
            if given and not on_branch:
                raise ConfigError(
                    f"table {table}: {option} applies to a stream into a branch, whose snapshots main follows once "
                    "audited; give branch='audit' (any name but main) too"
                )
        PublishSettings.of(self.publish, bool(audit), self.on_audit_failure, f"table {table}")
        if self.on_audit_failure != "continue" and not audit:
            raise ConfigError(f"table {table}: on_audit_failure applies to a stream with audit=[...] checks")
        if self.committer == Committer.DAEMON:
            self._check_daemon_audit(table)

    def _check_daemon_audit(self, table: str) -> None:
        """The daemon runs a stream's checks in a process of its own: it must be able to make them again."""
        if self.on_audit_failure != "continue":
            raise ConfigError(
                f"table {table}: on_audit_failure='stop' needs the inline committer, where the stream sees its audits; "
                "with committer='daemon' a failure stops publishing and the stream goes on"
            )
        lost = [str(d.get("name")) for d in map(describe_check, self.audit) if import_check(d) is None]
        if lost:
            raise ConfigError(
                f"table {table}: with committer='daemon' the committer runs the checks in its own process, and cannot "
                f"make {', '.join(lost)} again (a lambda, a closure, a method, or a function of the script itself): "
                "use the built-ins of icesink.checks, or functions at the top level of a module the committer can "
                "import"
            )

    def _check_event_time(self, table: str) -> None:
        for option in ("lateness", "idle_timeout"):
            value = getattr(self, option)
            if value is None:
                continue
            try:
                duration_micros(value)
            except DurationError as e:
                raise ConfigError(f"table {table}: {option}: {e}") from None
        if self.event_time is None and self.lateness is not None:
            raise ConfigError(
                f"table {table}: lateness applies to a stream with event_time; name the event-time column too"
            )
        for option in ("event_time", "watermark_from"):
            value = getattr(self, option)
            if value is not None and not value.strip():
                raise ConfigError(f"table {table}: {option} names a column; it is empty")
        if self.late == Late.DEAD_LETTER:
            self._check_dead_letter(table)
        if self.watermark_from is not None and (self.lateness is not None or self.split_by is not None):
            given = "lateness" if self.lateness is not None else "split_by"
            raise ConfigError(
                f"table {table}: watermark_from takes the watermark as the upstream table recorded it, lateness and "
                f"splits included; leave {given} out"
            )

    def _check_dead_letter(self, table: str) -> None:
        if self.event_time is None:
            raise ConfigError(
                f"table {table}: late='dead_letter' sets aside the rows whose event time is below the watermark; "
                "name the event-time column with event_time too"
            )
        if self.dead_letter is None or not self.dead_letter.strip():
            raise ConfigError(
                f"table {table}: late='dead_letter' needs the table that takes the late rows: "
                "dead_letter='namespace.table' (created if missing)"
            )
        if self.equality_fields:
            raise ConfigError(
                f"table {table}: late='dead_letter' applies to appends; a change stream's late changes are applied "
                "like the others, since setting one change of a key aside would leave its row at an older state "
                "(or let an older change win). Leave late out: late changes are written and counted"
            )
        if not self.atomic:
            raise ConfigError(
                f"table {table}: late='dead_letter' commits the late rows in the same catalog transaction as the "
                "rows on time; leave atomic out"
            )
        if self.dead_letter == table:
            raise ConfigError(
                f"table {table}: dead_letter names the table itself; late rows go to a table of their own, name another"
            )

    @classmethod
    def reference(cls) -> list[tuple[str, str, str]]:
        """(option, default, meaning) of every option, for the documentation."""
        rows = []
        # The stream's own options first, then its table's (in a stream into several tables, per Target).
        for option in sorted(fields(cls), key=lambda f: (f.name != "table", f.name in TABLE_OPTIONS)):
            value = option.default.value if isinstance(option.default, enum.Enum) else option.default
            default = "required (or tables)" if option.name == "table" else repr(value)
            rows.append((option.name, default, option.metadata["doc"]))
        return rows


@dataclass(frozen=True, kw_only=True)
class Target(TableOptions):
    """One table of a stream that writes several: ``icesink.stream(df, tables={"ns.t": icesink.Target(...)})``.

    ``select`` makes the table's rows out of each micro-batch, e.g. ``lambda df: df.where(...).select(...)``;
    without it the table gets the whole micro-batch. It must be a DataFrame transformation without
    actions: it is also applied to the streaming DataFrame, to check the table's fit before the stream
    starts. The other options (:class:`TableOptions`) mean what they mean for a stream into one table.
    """

    select: Callable[[DataFrame], DataFrame] | None = field(default=None, kw_only=False)


def _member(kind: type[enum.StrEnum], value: object, table: str, option: str) -> Any:
    allowed = tuple(m.value for m in kind)
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"table {table}: {option} must be one of {allowed}, not {value!r}")
    return kind(value)


def args_doc() -> str:
    """The ``Args:`` section of ``icesink.stream``'s docstring, from the options' own descriptions."""

    lines = ["    Args:", "        df: a streaming DataFrame whose columns fit the table."]
    for name, _, meaning in StreamOptions.reference():
        lines += textwrap.wrap(f"{name}: {meaning}", 110, initial_indent=" " * 8, subsequent_indent=" " * 12)
    return "\n".join(lines)
