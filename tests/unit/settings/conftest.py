"""The guard's fixture for the tests here: a simulated GPU's state file in this test's state dir."""

from tests.support.guard_fixtures import state_file

__all__ = ["state_file"]
