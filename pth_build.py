"""Build step: install `wattwise-accelerate.pth` at the top of site-packages (wheel and editable install).

A `.pth` file works only at the top of a site directory, where no package data can go, so the two build
commands that fill the wheel's root copy it there: `build_py` for a regular wheel, and `editable_wheel`
(`pip install -e .`, any mode) beside its own `__editable__.*.pth`. Its one line imports
`accelerate_energy.flag_hook` only when `ACCELERATE_ENERGY` is on (see that module).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from setuptools.command.build_py import build_py as _build_py
from setuptools.command.editable_wheel import editable_wheel as _editable_wheel

PTH_NAME = "wattwise-accelerate.pth"
PTH_SOURCE = Path(__file__).resolve().parent / "accelerate_energy" / PTH_NAME


class build_py(_build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self.copy_file(str(PTH_SOURCE), str(Path(self.build_lib) / PTH_NAME))

    def get_outputs(self, *args: Any, **kwargs: Any) -> list[str]:
        outputs = list(super().get_outputs(*args, **kwargs))
        if not self.editable_mode:
            outputs.append(str(Path(self.build_lib) / PTH_NAME))
        return outputs


class _WithPth:
    """An editable install's strategy that also writes our `.pth` into the wheel's root."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    def __call__(self, wheel: Any, files: list[str], mapping: dict[str, str]) -> None:
        self.strategy(wheel, files, mapping)
        wheel.writestr(PTH_NAME, PTH_SOURCE.read_bytes())

    def __enter__(self) -> _WithPth:
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.strategy.__exit__(*exc)


class editable_wheel(_editable_wheel):
    def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
        return _WithPth(super()._select_strategy(*args, **kwargs))
