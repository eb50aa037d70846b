"""The small inputs the documentation uses, shipped with the package, and the installed configurations.

`write_example_data(DIR)` copies the shipped files (a Perseus stage profile, power models measured on real
A40s, two workloads of Zeus's recurring traces, their licence notice) into `DIR` and writes the carbon
example beside them (hourly PUE, intensity and price series, and a simulated run directory).
`installed_config(NAME)` finds one of the configuration files that ship with wattwise (`tune.yaml`,
`cap.yaml`, `energy.yaml`, `lightning_cli.yaml`) wherever wattwise is installed.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from wattwise.errors import UsageError

#: The package folders holding the example data and the configuration files.
DATA = "data"
CONFIGS = "configs"


def _folder(name: str) -> Path:
    return Path(str(resources.files("wattwise").joinpath(name)))


def config_names() -> list[str]:
    """The names of the configuration files installed with wattwise, sorted."""
    return sorted(p.name for p in _folder(CONFIGS).glob("*.yaml"))


def installed_config(name: str) -> Path:
    """The path of an installed configuration file.

    Args:
        name: its file name, e.g. "tune.yaml" (".yaml" may be left out).

    Returns:
        The file's path inside the installed package.

    Raises:
        UsageError: no configuration of that name ships with wattwise; the message lists those that do.
    """
    file = name if name.endswith(".yaml") else f"{name}.yaml"
    path = _folder(CONFIGS) / file
    if "/" in name or not path.is_file():
        raise UsageError(f"no installed configuration named {name!r}; installed: {', '.join(config_names())}")
    return path


def write_example_data(directory: str | Path) -> list[Path]:
    """Write the example data into `directory` (created if needed); files already there are replaced.

    Args:
        directory: where to write.

    Returns:
        The files and folders written, in order.
    """
    from wattwise.carbon.example import write_example

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(_folder(DATA).iterdir()):
        if source.is_file():
            written.append(Path(shutil.copyfile(source, target / source.name)))
    configs = target / CONFIGS
    configs.mkdir(exist_ok=True)
    for name in config_names():
        written.append(Path(shutil.copyfile(_folder(CONFIGS) / name, configs / name)))
    carbon = write_example(target)
    written += [carbon.pue_csv, carbon.intensity_csv, carbon.price_csv, carbon.run_dir]
    return written
