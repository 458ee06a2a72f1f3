"""The committer lease on SQLite and PostgreSQL: one active committer per scope, fenced by its epoch."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.lease import Lease, LeaseLostError


@pytest.fixture
def advance(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Moves the leases' clock: a lifetime ends when the test says, however busy the machine (the database's
    own round trips take no lease time)."""
    from icesink.catalog import lease

    now = [lease._now()]
    monkeypatch.setattr(lease, "_now", lambda: now[0])

    def by(seconds: float) -> None:
        now[0] += datetime.timedelta(seconds=seconds)

    return by


def test_one_holder_renews_and_a_standby_waits(catalog_config: CatalogConfig) -> None:
    first = Lease(catalog_config, "*", "first", ttl=30)
    second = Lease(catalog_config, "*", "second", ttl=30)
    assert first.acquire() and first.epoch == 1
    assert not second.acquire()
    assert first.acquire()  # renewal keeps the epoch
    assert first.epoch == 1
    first.check()
    with pytest.raises(LeaseLostError, match="holds no lease"):
        second.check()


def test_expired_lease_is_taken_over_with_a_higher_epoch_and_fences_the_old_holder(
    catalog_config: CatalogConfig, advance: Callable[[float], None]
) -> None:
    old = Lease(catalog_config, "*", "old", ttl=10)
    new = Lease(catalog_config, "*", "new", ttl=30)
    assert old.acquire()
    advance(9)
    assert not new.acquire()
    advance(2)
    assert new.acquire() and new.epoch == 2
    with pytest.raises(LeaseLostError, match="now held by new at epoch 2"):
        old.check()
    assert not old.acquire()  # the stale holder does not get it back while the new one lives


def test_release_hands_over_at_once(catalog_config: CatalogConfig) -> None:
    first = Lease(catalog_config, "shop.orders", "first", ttl=30)
    second = Lease(catalog_config, "shop.orders", "second", ttl=30)
    assert first.acquire()
    first.release()
    assert second.acquire() and second.epoch == 2


def test_scopes_are_independent(catalog_config: CatalogConfig) -> None:
    assert Lease(catalog_config, "shop.a", "one").acquire()
    assert Lease(catalog_config, "shop.b", "two").acquire()


def test_overlapping_scopes_do_not_commit_side_by_side(
    catalog_config: CatalogConfig, advance: Callable[[float], None]
) -> None:
    """A committer for every table and one for shop.a share shop.a: the first one there wins."""
    everything = Lease(catalog_config, "*", "everything", ttl=10)
    narrower = Lease(catalog_config, "shop.a,shop.c", "narrower", ttl=30)
    disjoint = Lease(catalog_config, "shop.b", "disjoint", ttl=30)
    assert everything.acquire()
    assert not narrower.acquire()
    with pytest.raises(LeaseLostError):
        narrower.check()
    advance(9)
    everything.check()
    advance(2)  # the "*" committer dies: its lease expires
    assert narrower.acquire()
    narrower.check()
    assert disjoint.acquire()  # shop.b shares nothing with shop.a,shop.c
    disjoint.check()
    # The "*" committer comes back: the narrower scopes hold live leases, so it stands by.
    assert not everything.acquire()


def test_racing_overlapping_committers_settle_on_the_first(catalog_config: CatalogConfig) -> None:
    """Both took their lease before seeing the other (a race): at the next check the later one yields."""
    import datetime

    first = Lease(catalog_config, "*", "first", ttl=30)
    late = Lease(catalog_config, "shop.a", "late", ttl=30)
    assert first.acquire()
    # The race: "late" writes its row as its own overlap check would have let it had "first" not existed yet.
    now = datetime.datetime.now(datetime.UTC)
    assert late._try_insert(now, now + datetime.timedelta(seconds=30))
    with pytest.raises(LeaseLostError, match="yields to first"):
        late.check()
    first.check()
    assert not late.acquire()
