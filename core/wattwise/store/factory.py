"""Which store: a location (a SQLite file path or a database URL) turned into a SQLAlchemy URL and a store.

The default is the SQLite file `jobs.sqlite` in wattwise's state directory; `$WATTWISE_STORE` or a
location given (`--store`) chooses another file or a PostgreSQL database shared by several machines.
Recurring jobs and remembered power limits (`wattwise.store.limits_memory`) find their store by the
same rules. SQLAlchemy is imported only when a URL must be parsed or a store opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from wattwise.errors import UsageError
from wattwise.safe_files import state_dir

if TYPE_CHECKING:
    from wattwise.store.sql import SqlJobStore

#: The environment variable naming the store (a SQLite file path or a database URL).
STORE_ENV = "WATTWISE_STORE"


def default_store_url() -> str:
    """The store used when none is given: `$WATTWISE_STORE`, else `jobs.sqlite` in the state directory.

    Returns:
        Its SQLAlchemy URL.

    Raises:
        UsageError: `$WATTWISE_STORE` is empty, a directory, or not a database URL.
    """
    env = os.environ.get(STORE_ENV)
    if env:
        return store_url(env)
    return store_url(str(state_dir() / "jobs.sqlite"))


def store_url(location: str) -> str:
    """A SQLAlchemy URL from a URL or a file path (a path means a SQLite file).

    Args:
        location: A file path (`~` expanded, made absolute) or a database URL; `postgresql://` and
            `postgres://` URLs get the psycopg 3 driver.

    Returns:
        The SQLAlchemy URL (nothing is opened).

    Raises:
        UsageError: the location is empty, a directory, or not a database URL (a password in it is
            not repeated in the message).
    """
    location = location.strip()
    if not location:
        raise UsageError(f"the store location is empty; give a SQLite file path or a URL (or unset {STORE_ENV})")
    if "://" not in location:
        path = Path(location).expanduser().resolve()
        if path.is_dir():
            raise UsageError(
                f"the store {location} is a directory; give a SQLite file path (e.g. "
                f"{Path(location) / 'jobs.sqlite'}) or a database URL"
            )
        return f"sqlite:///{path}"
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    scheme, rest = location.split("://", 1)
    url = f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else location
    try:
        make_url(url)
    except (ArgumentError, ValueError) as err:
        shown = re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", location)
        raise UsageError(
            f"the store {shown!r} is not a database URL ({' '.join(str(err).split())}); give a "
            "SQLite file path or a URL such as postgresql://user@host/db"
        ) from None
    return url


def open_store(location: str | None = None) -> SqlJobStore:
    """Open the store at `location`, else `$WATTWISE_STORE`, else the default SQLite file.

    Opening upgrades the store's schema and delivers results spooled while it was unreachable.

    Args:
        location: A SQLite file path or a database URL (see `store_url`); None for the default.

    Raises:
        UsageError: the location is not a store, or the store was written by a newer wattwise.
        StoreUnavailable: the database cannot be reached.
    """
    from wattwise.store.sql import SqlJobStore

    return SqlJobStore(store_url(location) if location else default_store_url())
