"""What importing the device layer loads, in a fresh interpreter: no backend module or vendor binding until
a backend is used (the registry imports them lazily), and never the node agent (which sits on top)."""

from __future__ import annotations

import json
import subprocess
import sys


def _loaded(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with one of `prefixes` that a fresh Python has loaded after `statement`."""
    code = (
        f"import json, sys; {statement}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


def test_importing_the_devices_loads_no_backend_module_or_vendor_binding() -> None:
    assert (
        _loaded(
            "import wattwise.devices",
            (
                "pynvml",
                "amdsmi",
                "wattwise.devices.nvml",
                "wattwise.devices.rapl",
                "wattwise.devices.agent",
                "wattwise.devices.amdsmi",
                "wattwise.agent",
            ),
        )
        == []
    )


def test_the_agent_backend_loads_no_module_of_the_node_agent() -> None:
    assert _loaded("import wattwise.devices.agent", ("wattwise.agent",)) == []


def test_reading_the_backend_choices_imports_no_backend() -> None:
    assert (
        _loaded(
            "import wattwise.devices as d; d.backend_choices(); d.journalled_backends()",
            ("pynvml", "amdsmi", "wattwise.devices.nvml", "wattwise.devices.amdsmi"),
        )
        == []
    )
