"""The committer lease: at most one committer per scope commits, fenced by an epoch.

A committer holds the lease while it renews it within ``ttl``; a standby
takes it over once it has expired, incrementing the epoch. Every commit is
preceded by :meth:`Lease.check`, so a committer that lost its lease (paused,
partitioned, too slow to renew) stops before committing; the table's marker
remains the last line of defence for the race between check and commit.
Expiry uses the committers' clocks: keep them synchronised.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import as_utc, database_errors, engine
from icesink.errors import TransientError

metadata = sa.MetaData()
leases = sa.Table(
    "icesink_committer_leases",
    metadata,
    sa.Column("catalog_name", sa.String(255), primary_key=True),
    sa.Column("scope", sa.String(511), primary_key=True),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("epoch", sa.BigInteger(), nullable=False),
    sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)


class LeaseLostError(TransientError):
    """Raised when a committer finds that another committer took over its lease."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


MAINTENANCE_SCOPE_PREFIX = "maintain:"


def maintenance_scope(table: str) -> str:
    """The lease scope of maintenance on one table: separate from commit scopes, one maintainer at a time."""
    return f"{MAINTENANCE_SCOPE_PREFIX}{table}"


def _tables_of(scope: str) -> frozenset[str] | None:
    """The tables a scope covers; None for ``*`` (every table)."""
    return None if scope == "*" else frozenset(scope.split(","))


def _kind_of(scope: str) -> str:
    """Commit scopes and maintenance scopes never overlap each other: maintenance commits are validated."""
    return "maintain" if scope.startswith(MAINTENANCE_SCOPE_PREFIX) else "commit"


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease, and for how long: what a committer that may not wait for it tells its operator."""

    owner: str
    scope: str
    epoch: int
    acquired_at: datetime.datetime
    expires_at: datetime.datetime

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> LeaseHolder:
        return cls(row["owner"], row["scope"], row["epoch"], as_utc(row["acquired_at"]), as_utc(row["expires_at"]))

    def describe(self) -> str:
        since, until = (moment.isoformat(timespec="seconds") for moment in (self.acquired_at, self.expires_at))
        return f"{self.owner} (scope {self.scope!r}, epoch {self.epoch}) since {since}, until {until} unless renewed"


@dataclass
class Lease:
    """One committer's claim on a scope (``*`` for all tables, or a list of tables)."""

    config: CatalogConfig
    scope: str
    owner: str
    ttl: float = 10.0
    epoch: int | None = None

    def _where(self) -> sa.ColumnElement[bool]:
        return sa.and_(leases.c.catalog_name == self.config.name, leases.c.scope == self.scope)

    def acquire(self) -> bool:
        """Take or renew the lease; False while another live committer holds it or an overlapping scope."""
        now = _now()
        expires = now + datetime.timedelta(seconds=self.ttl)
        blocker = self._overlapping_holder(self._catalog_leases(), now)
        if blocker is not None:
            self.epoch = None
            return False
        with database_errors(self.config):
            if self._try_insert(now, expires):
                return True
        with database_errors(self.config), engine(self.config).begin() as connection:
            row = connection.execute(sa.select(leases).where(self._where()).with_for_update()).first()
            if row is None:
                return False  # released and deleted under us: try again next round
            held = row._mapping
            if held["owner"] == self.owner and held["epoch"] == self.epoch:
                updated = connection.execute(
                    leases.update()
                    .where(self._where(), leases.c.owner == self.owner, leases.c.epoch == self.epoch)
                    .values(expires_at=expires)
                )
                return updated.rowcount == 1
            if as_utc(held["expires_at"]) > now:
                self.epoch = None
                return False
            # Expired: take over with the next epoch, unless someone else just did.
            updated = connection.execute(
                leases.update()
                .where(self._where(), leases.c.epoch == held["epoch"])
                .values(owner=self.owner, epoch=held["epoch"] + 1, acquired_at=now, expires_at=expires)
            )
            if updated.rowcount != 1:
                return False
            self.epoch = held["epoch"] + 1
            return True

    def _try_insert(self, now: datetime.datetime, expires: datetime.datetime) -> bool:
        """The first committer of a scope creates its row; everyone else sees the unique key refuse."""
        with engine(self.config).connect() as connection:
            if connection.execute(sa.select(leases.c.epoch).where(self._where())).first() is not None:
                return False
        try:
            with engine(self.config).begin() as connection:
                connection.execute(
                    leases.insert().values(
                        catalog_name=self.config.name,
                        scope=self.scope,
                        owner=self.owner,
                        epoch=1,
                        acquired_at=now,
                        expires_at=expires,
                    )
                )
        except sa.exc.IntegrityError:
            return False
        self.epoch = 1
        return True

    def _catalog_leases(self) -> list[Mapping[str, Any]]:
        """Every lease of the catalog, in one query: what the scope checks below look at."""
        with database_errors(self.config), engine(self.config).connect() as connection:
            query = sa.select(leases).where(leases.c.catalog_name == self.config.name)
            return [dict(row._mapping) for row in connection.execute(query)]

    def _overlapping_holder(self, rows: list[Mapping[str, Any]], now: datetime.datetime) -> Mapping[str, Any] | None:
        """Another committer's live lease on a scope that shares tables with this one and came first.

        ``*`` and a ``--table`` list, or two lists naming the same table, must not commit side by
        side; the lease acquired first wins, the other committer stands by.
        """
        ours = _tables_of(self.scope)
        mine = next((row for row in rows if row["scope"] == self.scope), None)
        # Only a live lease of our own counts as having been there first; an expired one starts over.
        if mine is not None and mine["owner"] == self.owner and as_utc(mine["expires_at"]) > now:
            our_start = (as_utc(mine["acquired_at"]), self.owner)
        else:
            our_start = (now, self.owner)
        for held in rows:
            if held["scope"] == self.scope or as_utc(held["expires_at"]) <= now or held["owner"] == self.owner:
                continue
            if _kind_of(held["scope"]) != _kind_of(self.scope):
                continue
            theirs = _tables_of(held["scope"])
            overlaps = ours is None or theirs is None or bool(ours & theirs)
            if overlaps and (as_utc(held["acquired_at"]), held["owner"]) < our_start:
                return held
        return None

    def holder(self) -> LeaseHolder | None:
        """The other committer whose live lease keeps this one out: on this scope, or on a scope sharing tables
        with it that came first. None when none does (the lease is free, expired, or this committer's own)."""
        rows = self._catalog_leases()
        now = _now()
        same = next((row for row in rows if row["scope"] == self.scope), None)
        if same is not None and same["owner"] != self.owner and as_utc(same["expires_at"]) > now:
            return LeaseHolder.of(same)
        overlapping = self._overlapping_holder(rows, now)
        return LeaseHolder.of(overlapping) if overlapping is not None else None

    def check(self) -> None:
        """Raise :class:`LeaseLostError` unless this committer still holds a live lease (one query: runs per commit)."""
        rows = self._catalog_leases()
        held = next((row for row in rows if row["scope"] == self.scope), None)
        if held is None or self.epoch is None:
            raise LeaseLostError(f"committer {self.owner} holds no lease on scope {self.scope!r}")
        now = _now()
        if held["owner"] != self.owner or held["epoch"] != self.epoch or as_utc(held["expires_at"]) <= now:
            raise LeaseLostError(
                f"committer {self.owner} lost its lease on scope {self.scope!r} (epoch {self.epoch}; now held by "
                f"{held['owner']} at epoch {held['epoch']}); it stops committing"
            )
        blocker = self._overlapping_holder(rows, now)
        if blocker is not None:
            raise LeaseLostError(
                f"committer {self.owner} on scope {self.scope!r} yields to {blocker['owner']} (scope "
                f"{blocker['scope']!r}), whose scope shares tables "
                "with it and which was there first; it stops committing"
            )

    def release(self) -> None:
        """Let a standby take over at once (on a clean shutdown)."""
        if self.epoch is None:
            return
        with database_errors(self.config), engine(self.config).begin() as connection:
            connection.execute(
                leases.update()
                .where(self._where(), leases.c.owner == self.owner, leases.c.epoch == self.epoch)
                .values(expires_at=_now())
            )
        self.epoch = None


class LeaseKeeper:
    """Renews a held lease from a background thread while long work runs (every third of its ttl).

    The work checks :meth:`Lease.check` before it commits anything; a renewal
    that fails (another owner took over, the database is gone) is left to
    that check to report.
    """

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease {lease.scope}", daemon=True)

    def _renew(self) -> None:
        while not self._stop.wait(self._lease.ttl / 3):
            with contextlib.suppress(Exception):  # reported by the check before the next commit
                if not self._lease.acquire():
                    return

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
