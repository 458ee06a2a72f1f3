"""Where a group of tables committed together publishes: one checkpoint of the job every table can show."""

from __future__ import annotations

from collections.abc import Sequence

from icesink.audit.chain import Chain, Link


def group_cut(job_id: str, chains: Sequence[Chain], done_only: bool = False) -> list[tuple[Chain, Link]]:
    """The newest checkpoint of the job at which every table's main can move together, and where each goes.

    Each table goes to its newest snapshot holding the job's checkpoints up to the cut (another tool's snapshots
    count with the checkpoint before them); that snapshot must be publishable in every table that moves. With
    ``done_only``, the cut is a checkpoint whose commit made a partition done in some table.
    """
    keyed: list[tuple[Chain, list[int]]] = []
    for chain in chains:
        keys, last = [], -1
        for link in chain.links:
            if link.job_id == job_id and link.checkpoint_id is not None:
                last = link.checkpoint_id
            keys.append(last)
        keyed.append((chain, keys))
    candidates = sorted({k for _, keys in keyed for k in keys if k >= 0}, reverse=True)
    if done_only:
        made_done = {
            key
            for chain, keys in keyed
            for link, key in zip(chain.links, keys, strict=True)
            if link.makes_partitions_done
        }
        candidates = [c for c in candidates if c in made_done]
    for cut in candidates:
        moves: list[tuple[Chain, Link]] = []
        for chain, keys in keyed:
            upto = [i for i, key in enumerate(keys) if key <= cut]
            if not upto:
                continue
            target = chain.links[upto[-1]]
            if not target.publishable:
                break
            moves.append((chain, target))
        else:
            if moves:
                return moves
    return []


def held_by_failed_audit(chain: Chain) -> bool:
    """Whether the branch's newest audit after main failed (a later one that passed would cover it)."""
    held = False
    for link in chain.links:
        if link.entry is not None:
            held = not link.entry.passed
    return held
