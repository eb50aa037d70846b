"""The names the `amdsmi` binding defines, read from its source without importing it.

Importing the real binding needs ROCm's `libamd_smi.so` (without it the import prints a message and fails
with a KeyError), so the table of names the fake must match is taken from the package's source files by
parsing them. The table is stored in `tests/data/amdsmi_signatures.json`; to refresh it from a newer
release::

    pip download --no-deps amdsmi -d /tmp/amdsmi && cd /tmp/amdsmi && unzip -o amdsmi-*.whl
    python -m tests.support.amdsmi_signatures /tmp/amdsmi/amdsmi 7.0.2 > tests/data/amdsmi_signatures.json
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

#: The binding's functions wattwise calls or the fake defines: their parameter names are compared.
FUNCTIONS = (
    "amdsmi_init",
    "amdsmi_shut_down",
    "amdsmi_get_processor_handles",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_device_bdf",
    "amdsmi_get_gpu_enumeration_info",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_power_info",
    "amdsmi_get_power_cap_info",
    "amdsmi_set_power_cap",
    "amdsmi_get_clk_freq",
    "amdsmi_get_clock_info",
    "amdsmi_set_gpu_clk_range",
    "amdsmi_set_gpu_perf_level",
    "amdsmi_get_gpu_perf_level",
)
#: Enumerations whose member names the fake defines (their values come from the wrapper's constants).
ENUMS = ("AmdSmiInitFlags", "AmdSmiClkType", "AmdSmiDevPerfLevel")
EXCEPTIONS = (
    "AmdSmiException",
    "AmdSmiLibraryException",
    "AmdSmiRetryException",
    "AmdSmiTimeoutException",
    "AmdSmiParameterException",
)


def signature_table(package_dir: Path, version: str) -> dict[str, Any]:
    """Functions' parameter names, status codes, enum members and exception names of the binding.

    Args:
        package_dir: the unpacked `amdsmi` package (holding amdsmi_interface.py and amdsmi_wrapper.py).
        version: the package's version, stored with the table.

    Returns:
        A JSON-serialisable table: {"version", "functions", "status_codes", "enums", "exceptions"}.
    """
    interface = ast.parse((package_dir / "amdsmi_interface.py").read_text())
    wrapper = ast.parse((package_dir / "amdsmi_wrapper.py").read_text())
    exceptions = ast.parse((package_dir / "amdsmi_exception.py").read_text())
    constants = {
        node.targets[0].id: node.value.value
        for node in wrapper.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, int)
    }
    functions = {
        node.name: [a.arg for a in node.args.args]
        for node in interface.body
        if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS
    }
    enums: dict[str, dict[str, int]] = {}
    for node in interface.body:
        if isinstance(node, ast.ClassDef) and node.name in ENUMS:
            enums[node.name] = {
                item.targets[0].id: constants[item.value.attr]
                for item in node.body
                if isinstance(item, ast.Assign)
                and isinstance(item.targets[0], ast.Name)
                and isinstance(item.value, ast.Attribute)
                and item.value.attr in constants
            }
    return {
        "version": version,
        "functions": {name: functions[name] for name in FUNCTIONS if name in functions},
        "status_codes": {k: v for k, v in constants.items() if k.startswith("AMDSMI_STATUS_")},
        "enums": enums,
        "exceptions": sorted(n.name for n in exceptions.body if isinstance(n, ast.ClassDef) and n.name in EXCEPTIONS),
    }


if __name__ == "__main__":
    print(json.dumps(signature_table(Path(sys.argv[1]), sys.argv[2]), indent=1, sort_keys=True))
