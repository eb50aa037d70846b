"""Job names: what a user may call a training job (`job`, `ACCELERATE_ENERGY_JOB`, recurring jobs).

One rule wherever a name enters, so a name that keys the store and the limits memory, and is printed in
summaries, logs and terminals, can never hold a control character or look like a path that climbs out of
a folder.
"""

from __future__ import annotations

import re

from wattwise.errors import Key, UsageError

#: The longest job name (the store's column holds 128 characters).
MAX_JOB_NAME = 128
#: Parts of letters, digits, spaces and ._:@+- (each starting with a letter or digit, none ending with a
#: space), joined by single slashes.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._:@+ -]*[A-Za-z0-9._:@+-])?"
_NAME = re.compile(rf"{_PART}(?:/{_PART})*")


def check_job_name(name: object, *, setting: str | Key = "job", error: type[UsageError] = UsageError) -> str:
    """`name` when it is a valid job name, else `error` naming `setting` (as text, or a setting) and the fix.

    A job name keys the store and the limits memory and is printed in summaries and logs: it may not be
    empty or longer than MAX_JOB_NAME, hold a control character, a backslash or `..`, start or end with a
    space, or start, end or double a `/` (a slash only separates parts, as in `bert/squad`).
    """
    if isinstance(name, str) and len(name) <= MAX_JOB_NAME and ".." not in name and _NAME.fullmatch(name):
        return name
    shown = repr(name) if not isinstance(name, str) or len(name) <= 60 else f"{name[:57]!r}... ({len(name)} chars)"
    raise error(
        setting,
        f": {shown} is not a valid name; use 1-{MAX_JOB_NAME} characters of letters, digits, spaces "
        "and ._:@+-, starting with a letter or digit, a / only between parts (as in bert/squad), no '..': "
        "e.g. bert-nightly",
    )
