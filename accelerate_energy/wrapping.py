"""Wrapping a framework class's `__init__` once, so that each new instance is equipped by wattwise.

The flag's hook equips every `Accelerator` (`accelerate_energy.auto_attach`) and the Trainer's callback
every `transformers.Trainer` (`accelerate_energy.hf_trainer`) this way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: Marks what wattwise wrapped, so nothing is wrapped twice.
MARK = "_wattwise_flag"


def after_init(cls: type, equip: Callable[[Any], None]) -> None:
    """Wrap `cls.__init__` (once) so that `equip(instance)` runs after it."""
    original = cls.__init__  # type: ignore[misc]
    if getattr(original, MARK, False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        equip(self)

    setattr(__init__, MARK, True)
    cls.__init__ = __init__  # type: ignore[misc]
