"""What `ACCELERATE_ENERGY=1` loads at interpreter start-up: one import hook, nothing else.

How the flag works without a line in the script: installing wattwise puts `wattwise-accelerate.pth` at the
top of site-packages, and Python runs its one line at every interpreter start (the way coverage.py measures
subprocesses). With `ACCELERATE_ENERGY` unset or off, that line reads the variable and stops. With it on,
it imports this module (which imports only `sys`) and calls `install`, which puts `PatchOnImport` first in
`sys.meta_path`. That finder finds nothing itself: when the script imports `accelerate.accelerator` or
`transformers.trainer`, the usual finders load the module and, once it has run,
`accelerate_energy.auto_attach` patches it (every `Accelerator` attached, every `Trainer` given the flag's
callback); once it has seen both, the finder removes itself. `accelerate launch` and `torchrun` start each
worker as a new interpreter with the launcher's environment, so every worker installs the hook too. A
process that imports neither module (pip, a shell tool, a test runner) loads this module and nothing more.
"""

from __future__ import annotations

import sys

# Not `typing.TYPE_CHECKING`: importing `typing` would cost every Python process with the flag on.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: The modules `accelerate_energy.auto_attach.patch` patches once the script imports them.
WATCHED = ("accelerate.accelerator", "transformers.trainer")


class PatchOnImport:
    """A `sys.meta_path` finder that finds nothing itself: each `WATCHED` module is patched once it has run."""

    def __init__(self) -> None:
        self.waiting = set(WATCHED)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """None, except for a `WATCHED` module: its spec, from the other finders, with a loader that patches it."""
        if fullname not in self.waiting:
            return None
        self.waiting.discard(fullname)
        if not self.waiting:
            sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)  # the other finders: this one no longer waits for `fullname`
        loader = spec.loader if spec is not None else None
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            from accelerate_energy import auto_attach

            auto_attach.patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign,union-attr]
        return spec


def install() -> None:
    """Put the finder first in `sys.meta_path` (once, however many site folders hold the `.pth` file)."""
    if not any(isinstance(finder, PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, PatchOnImport())
