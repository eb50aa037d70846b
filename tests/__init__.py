"""The test suite: `unit/` (in-process, fast) and `integration/` (processes, servers, training runs)."""
