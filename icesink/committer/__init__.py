"""The committer: the ledger of staged checkpoints and the code that turns them into snapshots."""
