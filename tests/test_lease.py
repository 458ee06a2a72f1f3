"""The committer lease on SQLite and PostgreSQL: one active committer per scope, fenced by its epoch."""

from __future__ import annotations

import time

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.committer.lease import Lease, LeaseLostError


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
    catalog_config: CatalogConfig,
) -> None:
    old = Lease(catalog_config, "*", "old", ttl=0.5)
    new = Lease(catalog_config, "*", "new", ttl=30)
    assert old.acquire()
    assert not new.acquire()
    time.sleep(0.7)
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
