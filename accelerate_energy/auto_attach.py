"""`ACCELERATE_ENERGY=1` alone: every `Accelerator` the process builds is attached, no line in the script.

`accelerate_energy.flag_hook` (imported at interpreter start-up by the installed `wattwise-accelerate.pth`
when the flag is on) imports this module only when the script imports `accelerate.accelerator` or
`transformers.trainer`, so a process that imports neither pays nothing. `install` then waits, with a
`sys.meta_path` finder, until those modules are executed, and wraps `Accelerator.__init__`: each new
accelerator is armed with the flag's settings (validated there, so a bad variable fails where the
accelerator is built) and attached when it prepares its first optimizer, unless the script attached it
itself by then (`attach(acc, plugin)` with its own settings keeps them; nothing is attached twice).
Under distributed training, every attached run also finishes when the script destroys the process group
without `end_training`, so its summary is still written. Importing this module loads neither torch nor
accelerate.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import weakref
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from typing_extensions import override

from accelerate_energy.wrapping import MARK, after_init

_TARGET = "accelerate.accelerator"
#: Every accelerator armed in this process (to finish their runs before the process group goes away).
_ARMED: weakref.WeakSet[Any] = weakref.WeakSet()


class _AccelerateFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when a module of `_PATCHES` is imported, patches it once executed."""

    @override
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PATCHES or fullname in _SEEN:
            return None
        _SEEN.add(fullname)
        if set(_PATCHES) <= _SEEN:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the other finders find the real module
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _PATCHES[fullname](module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def take_over(
    fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
) -> importlib.machinery.ModuleSpec | None:
    """Install, from the start-up finder, as the script first imports `fullname` (a module of `_PATCHES`).

    Returns:
        The spec of `fullname`, whose module is patched once executed.
    """
    install()
    finder = next((f for f in sys.meta_path if isinstance(f, _AccelerateFinder)), None)
    return finder.find_spec(fullname, path, target) if finder is not None else None


def install() -> None:
    """Attach every `Accelerator` built from now on, and equip every `transformers.Trainer` (idempotent)."""
    pending = False
    for name, patcher in _PATCHES.items():
        module = sys.modules.get(name)
        if module is not None:
            _SEEN.add(name)
            patcher(module)
        else:
            pending = True
    if pending and not any(isinstance(f, _AccelerateFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AccelerateFinder())


def patch(module: ModuleType) -> None:
    """Wrap `module.Accelerator.__init__` so each new accelerator is armed."""

    def equip(accelerator: Any) -> None:
        if accelerator not in _ARMED:  # a subclass's __init__ may run the base's more than once
            arm(accelerator)

    after_init(module.Accelerator, equip)


def patch_trainer(module: ModuleType) -> None:
    """Have every `module.Trainer` keep its energy run in checkpoints and logs.

    Importing `accelerate_energy.hf_trainer` wraps `Trainer.__init__`: each Trainer's
    `EnergyTrainerCallback` is bound to it, or the flag's is added.
    """
    from accelerate_energy import hf_trainer

    hf_trainer.equip_every_trainer()


#: The modules the hook patches when the script imports them, and how.
_PATCHES: dict[str, Callable[[ModuleType], None]] = {_TARGET: patch, "transformers.trainer": patch_trainer}
#: Those already seen (patched, or being imported).
_SEEN: set[str] = set()


def arm(accelerator: Any) -> None:
    """Attach `accelerator` with the flag's settings when it prepares its first optimizer.

    Nothing happens when the script attached it by then.
    """
    from accelerate_energy.adapter import attach, energy
    from accelerate_energy.plugin import EnergyPlugin

    plugin = EnergyPlugin()
    if not plugin.enabled:
        return
    plugin.to_config()  # a bad variable fails here, where the accelerator is built
    _ARMED.add(accelerator)
    _finish_before_destroy()
    prepare_optimizer = accelerator.prepare_optimizer

    def prepare_optimizer_armed(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        if energy(accelerator) is not None:  # attached by the script: nothing to add
            return prepare_optimizer(optimizer, *args, **kwargs)
        del accelerator.prepare_optimizer  # back to the class's method, which `attach` wraps
        attach(accelerator, plugin)
        return accelerator.prepare_optimizer(optimizer, *args, **kwargs)

    accelerator.prepare_optimizer = prepare_optimizer_armed


def _finish_before_destroy() -> None:
    """Finish the armed accelerators' runs when the default process group is destroyed.

    Every process destroys it at the same point, while the processes can still combine their figures.
    """
    import torch.distributed as dist

    original = dist.destroy_process_group
    if getattr(original, MARK, False):
        return

    @functools.wraps(original)
    def destroy_process_group(group: Any = None, *args: Any, **kwargs: Any) -> Any:
        if group is None:
            from accelerate_energy.adapter import energy

            for accelerator in list(_ARMED):
                found = energy(accelerator)
                if found is not None:
                    found.finish("completed")
        return original(group, *args, **kwargs)

    setattr(destroy_process_group, MARK, True)
    dist.destroy_process_group = destroy_process_group
