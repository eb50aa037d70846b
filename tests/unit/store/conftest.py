"""The store tests' fixture: an SQLite store's URL in this test's temporary folder."""

from tests.support.stores import sqlite_url

__all__ = ["sqlite_url"]
