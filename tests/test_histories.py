"""A fixed set of random histories, each checked against the model after every step (``make histories`` runs
new seeds for as long as you like; see tests/histories)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.histories.runner import fails, generate, run, shrink

# Seeds whose tables cover, between them: appends and upserts, keys in structs and on uuids, nested types,
# partition transforms, every kind of step. Found bugs get a seed here (and a named test of their own).
SEEDS = (1, 2, 3, 5, 8, 13)


@pytest.mark.interop
@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_history_equals_the_model(seed: int, tmp_path: Path) -> None:
    history = generate(seed, length=18)
    outcome = run(history, tmp_path)
    if outcome.failure is not None:
        short = shrink(history, fails, budget_seconds=60)
        pytest.fail(f"{short.describe()}\nfailed with: {outcome.failure}\nreplay: make histories SEED={seed}")
