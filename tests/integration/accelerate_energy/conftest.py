"""The Accelerate adapter's fixture for the tests here: Accelerate's state reset around each test."""

from tests.support.accelerate_fixtures import fresh_accelerate

__all__ = ["fresh_accelerate"]
