"""The patches of `ACCELERATE_ENERGY=1` alone: every `Accelerator` attached, every `Trainer` equipped.

Imported by the flag's import hook (`accelerate_energy.flag_hook`) once the script has imported
`accelerate.accelerator` or `transformers.trainer`, never before, so a process that imports neither pays
nothing. Two patches, each made once:

- `Accelerator.__init__`: each new accelerator is armed with the flag's settings (validated there, so a
  bad variable fails where the accelerator is built) and attached when it prepares its first optimizer,
  unless the script attached it itself by then (`attach(acc, plugin)` with its own settings keeps them;
  nothing is attached twice). Under distributed training, every armed accelerator's run also finishes
  when the script destroys the default process group without `end_training` (a wrap of
  `torch.distributed.destroy_process_group`, made at the first arming), so its summary still combines
  every process's figures.
- `Trainer.__init__`: importing `accelerate_energy.hf_trainer` has each Trainer without an
  `EnergyTrainerCallback` of its own take the flag's (checkpoints and logs).
"""

from __future__ import annotations

import functools
import weakref
from types import ModuleType
from typing import Any

from accelerate_energy.wrapping import MARK, after_init

#: Every accelerator armed in this process (to finish their runs before the process group goes away).
_ARMED: weakref.WeakSet[Any] = weakref.WeakSet()


def patch(module: ModuleType) -> None:
    """Patch a module of `flag_hook.WATCHED` that has just run: its `Accelerator` or its `Trainer`."""
    if module.__name__ == "accelerate.accelerator":
        after_init(module.Accelerator, _arm_once)
    else:
        from accelerate_energy import hf_trainer

        hf_trainer.equip_every_trainer()


def _arm_once(accelerator: Any) -> None:
    if accelerator not in _ARMED:  # a subclass's __init__ may run the base's more than once
        arm(accelerator)


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
                    found.finish()
        return original(group, *args, **kwargs)

    setattr(destroy_process_group, MARK, True)
    dist.destroy_process_group = destroy_process_group
