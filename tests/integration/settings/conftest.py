"""The guard's fixtures for the tests here: a simulated GPU's state file, and a child that holds a limit."""

from tests.support.guard_fixtures import child, state_file

__all__ = ["child", "state_file"]
