"""The store's Alembic revisions, one file each (`v<revision>_<slug>.py`), read by Alembic in order."""
