"""What `ACCELERATE_ENERGY=1` loads at interpreter start-up: one tiny import finder, nothing else.

The installed `wattwise-accelerate.pth` imports this module and calls `install` in every Python process
started with the flag on (the way coverage.py measures subprocesses), so it runs in every worker that
`accelerate launch` or `torchrun` starts. It imports only `sys`: a process that never imports
`accelerate.accelerator` nor `transformers.trainer` (a shell tool, `pip`, a test runner) pays no more
than this module. The first time one of them is imported, `accelerate_energy.auto_attach` takes over
(it attaches every `Accelerator` and equips every `Trainer`).
"""

from __future__ import annotations

import sys

# Not `typing.TYPE_CHECKING`: importing `typing` would cost every Python process with the flag on.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: The modules whose import hands over to `accelerate_energy.auto_attach`.
WATCHED = frozenset({"accelerate.accelerator", "transformers.trainer"})


class StartupFinder:
    """Finds nothing itself: the first import of a `WATCHED` module hands it over to `auto_attach`."""

    def __init__(self) -> None:
        self.waiting = True

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """None for every module but the first `WATCHED` one, whose spec `auto_attach.take_over` gives."""
        if fullname not in WATCHED or not self.waiting:
            return None
        self.waiting = False
        from accelerate_energy import auto_attach

        return auto_attach.take_over(fullname, path, target)


def install() -> None:
    """Hand over to `auto_attach` now if a watched module is already imported, else when one is (idempotent)."""
    if any(name in sys.modules for name in WATCHED):
        from accelerate_energy import auto_attach

        auto_attach.install()
    elif not any(isinstance(f, StartupFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, StartupFinder())
