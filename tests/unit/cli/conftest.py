"""The CLI tests' fixture: a command run in a folder of its own, with a fresh state dir."""

from tests.support.cli_fixtures import cli_workdir

__all__ = ["cli_workdir"]
