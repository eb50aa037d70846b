"""The small inputs the documentation uses, shipped with the package.

`write_example_data(DIR)` copies the shipped files (a Perseus stage profile, power models measured on real
A40s, two workloads of Zeus's recurring traces, their licence notice) into `DIR` and writes the carbon
example beside them (hourly PUE, intensity and price series, and a simulated run directory).
The configuration files that ship with wattwise are found by `wattwise.config.installed_config`.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

#: The package folder holding the example data.
DATA = "data"


def _folder(name: str) -> Path:
    return Path(str(resources.files("wattwise").joinpath(name)))


def write_example_data(directory: str | Path) -> list[Path]:
    """Write the example data into `directory` (created if needed); files already there are replaced.

    Args:
        directory: where to write.

    Returns:
        The files and folders written, in order.
    """
    from wattwise.carbon.example import write_example
    from wattwise.config import INSTALLED_CONFIGS, config_names, installed_configs_folder

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(_folder(DATA).iterdir()):
        if source.is_file():
            written.append(Path(shutil.copyfile(source, target / source.name)))
    configs = target / INSTALLED_CONFIGS
    configs.mkdir(exist_ok=True)
    for name in config_names():
        written.append(Path(shutil.copyfile(installed_configs_folder() / name, configs / name)))
    carbon = write_example(target)
    written += [carbon.pue_csv, carbon.intensity_csv, carbon.price_csv, carbon.run_dir]
    return written
