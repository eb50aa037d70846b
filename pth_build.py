"""Build step: put `wattwise-accelerate.pth` at the root of the wheel, regular or editable.

Python reads a `.pth` file only at the top of a site folder, where setuptools' package data and data files
cannot go, so `build_py` copies it there as well: into `build_lib`, whose tree is the regular wheel, or,
for an editable install (`pip install -e .`), into the folder that setuptools packs as the editable wheel
(the `install` command's `install_lib` there). The file's one line turns the flag's import hook on only
when `ACCELERATE_ENERGY` is set (see `accelerate_energy.flag_hook`); uninstalling wattwise removes it.
"""

from __future__ import annotations

from pathlib import Path

from setuptools.command.build_py import build_py as _build_py

PTH_NAME = "wattwise-accelerate.pth"
PTH_SOURCE = Path(__file__).resolve().parent / "accelerate_energy" / PTH_NAME


class build_py(_build_py):
    def run(self) -> None:
        super().run()
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        self.copy_file(str(PTH_SOURCE), str(Path(root) / PTH_NAME))
