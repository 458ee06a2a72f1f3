"""A randomized history tester: seeded histories of what users and other tools do to a table, run against
icesink's real code and checked against a model too simple to be wrong (see README, "History tester")."""
