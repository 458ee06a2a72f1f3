"""When ``main`` follows a stream's branch: the ``publish`` and ``on_audit_failure`` options, resolved."""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass

from icesink.completeness.durations import DurationError, duration_micros
from icesink.errors import ConfigError


class PublishPolicy(enum.StrEnum):
    CHECKPOINT = "checkpoint"  # after every audited checkpoint
    MANUAL = "manual"  # never by the stream: `icesink publish`
    PARTITION_DONE = "partition-done"  # when a commit makes a time partition done
    INTERVAL = "interval"  # at most every `interval` (a duration given as the option)


class AuditFailure(enum.StrEnum):
    CONTINUE = "continue"  # publishing stops; the stream goes on writing to the branch
    STOP = "stop"  # the stream stops with the failure


@dataclass(frozen=True)
class PublishSettings:
    """How a stream into a branch publishes: when, and what a failed audit does."""

    policy: PublishPolicy
    interval_seconds: float = 0.0
    on_failure: AuditFailure = AuditFailure.CONTINUE

    @classmethod
    def of(
        cls, publish: str | datetime.timedelta | None, audited: bool, on_audit_failure: str, where: str
    ) -> PublishSettings:
        """From the stream's options: ``publish`` is a policy's name or a duration (at most that often); by
        default ``checkpoint`` when there are audits, ``manual`` when not."""
        try:
            failure = AuditFailure(on_audit_failure)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in AuditFailure)
            raise ConfigError(f"{where}: on_audit_failure takes {allowed}, not {on_audit_failure!r}") from None
        if publish is None:
            return cls(PublishPolicy.CHECKPOINT if audited else PublishPolicy.MANUAL, on_failure=failure)
        if isinstance(publish, str) and publish in {p.value for p in PublishPolicy if p != PublishPolicy.INTERVAL}:
            return cls(PublishPolicy(publish), on_failure=failure)
        try:
            micros = duration_micros(publish)
        except (DurationError, TypeError):
            raise ConfigError(
                f"{where}: publish takes 'checkpoint', 'manual', 'partition-done' or a duration such as "
                f"'30 seconds' (publish at most that often), not {publish!r}"
            ) from None
        return cls(PublishPolicy.INTERVAL, micros / 1e6, failure)
