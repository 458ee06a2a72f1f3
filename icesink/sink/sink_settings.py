"""The settings of a stream's micro-batches into one table: its options as resolved before the query starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icesink.audit.publish_policy import PublishSettings
from icesink.catalog.config import CatalogConfig
from icesink.completeness.durations import duration_micros
from icesink.sink.options import Committer, StreamOptions
from icesink.table_options import Writer
from icesink.table_ref import MAIN_BRANCH, TableRef

if TYPE_CHECKING:
    from icesink.sink.event_time import EventTimeSettings
    from icesink.writer.spec import ChangeSpec


@dataclass(frozen=True)
class SinkSettings:
    """The resolved arguments of ``icesink.stream``."""

    table: str
    catalog: CatalogConfig
    job_id: str | None
    inline_commit: bool
    changes: ChangeSpec | None = None
    passthrough: tuple[str, ...] = ()
    commit_attempts: int = 8
    expire_snapshots: bool = False
    writer: Writer = Writer.AUTO
    checkpoint_location: str | None = None
    maintain: bool = False
    evolve_schema: bool = False
    branch: str = MAIN_BRANCH  # the branch its checkpoints commit to
    event_time: EventTimeSettings | None = None
    idle_timeout: int = 300_000_000  # microseconds (the stream's option, resolved)
    on_partition_done: Callable[[dict[str, object]], None] | None = None
    audit: tuple[Callable[..., list[str]], ...] = ()  # the checks of its branch's snapshots
    publish: PublishSettings | None = None  # when main follows the branch (None: on main)

    @property
    def ref(self) -> TableRef:
        return TableRef(self.table, self.branch)

    @classmethod
    def of(cls, options: StreamOptions, config: CatalogConfig, **planned: Any) -> SinkSettings:
        """A stream's settings from its options; ``planned`` adds what preflight found for its table (its
        change columns, the columns it passes through)."""
        return cls(
            table=options.table,
            catalog=config,
            job_id=options.job_id,
            inline_commit=options.committer == Committer.INLINE,
            expire_snapshots=options.expire_snapshots,
            writer=options.writer,
            checkpoint_location=options.checkpoint_location,
            maintain=options.maintain,
            evolve_schema=options.evolve_schema,
            idle_timeout=duration_micros(options.idle_timeout),
            on_partition_done=options.on_partition_done,
            branch=options.branch or MAIN_BRANCH,
            audit=tuple(options.audit),
            publish=(
                PublishSettings.of(options.publish, bool(options.audit), options.on_audit_failure, options.table)
                if options.branch not in (None, MAIN_BRANCH)
                else None
            ),
            **planned,
        )
