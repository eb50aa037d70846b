"""Fakes and helpers shared by the unit and integration tests, imported as `tests.support.<module>`.

No test module imports another test module: what two of them share lives here.
"""
