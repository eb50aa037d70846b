"""Typed configuration: dataclasses turned into OmegaConf structured configs.

Defaults live in the dataclasses below; YAML files (see `configs/`) and dotlist overrides
(`power_limit.eta=0.3`) are merged on top. An unknown key, a wrong type or an invalid value is a
`ConfigError` that names the key and says what would be accepted. The same `EnergyConfig` serves the
Lightning callback, the Accelerate plugin and the CLI.

`SETTINGS` is the one list of the settings a user gives by name: each is a keyword argument of
`EnergyCallback`, a field of `EnergyPlugin` read from `ACCELERATE_ENERGY_<NAME>`, and maps to one key of
`EnergyConfig`; every other key is reached through a YAML file (`config`) or dotlist `overrides`. Errors
name config keys as `wattwise.errors.Key`s; an adapter or the CLI shows them as its own variables or flags
(`ConfigError.message(names)`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import io
import math
import os
import re
import shlex
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from wattwise import bounds
from wattwise.devices import BACKEND_ENV, PhysicsName, backend_choices
from wattwise.errors import ConfigError, Key, UsageError
from wattwise.names import check_job_name
from wattwise.power_limit import MAX_PROFILED_LIMITS
from wattwise.safe_files import read_text
from wattwise.vocabulary import RunMode, Selector, SimulatedGpuName

#: What drives a simulated GPU's load (`devices.simulated_drive`): emulated work only, or the training steps.
SIMULATED_DRIVES = ("off", "steps")
#: Upper bound of every step count (wait, warm-up, profile steps, logging interval).
MAX_COUNT = 1_000_000
#: Most simulated GPUs one process may see.
MAX_GPUS = 1024
#: Watts: the finest distance between profiled limits, and the highest power any limit or cap may name.
MIN_STEP_W = 1.0
MAX_POWER_W = bounds.POWER_W.high


@dataclass
class SimulatedGPUConfig:
    """The simulated GPU, used only when asked for by name.

    `devices.backend=simulated` (or `WATTWISE_BACKEND=simulated`).
    """

    #: How many simulated GPUs one process sees.
    num_gpus: int = 1
    #: CSV `power_limit,time,power` (W, relative step time, average W); None: the built-in model.
    power_model: str | None = None
    #: Time of one emulated step at the maximum power limit, in seconds.
    base_step_time_s: float = 0.02
    #: Where simulated GPUs keep their settings (default: `<state dir>/simulated`).
    state_dir: str | None = None


@dataclass
class DevicesConfig:
    """Which devices a run measures and may change: the backend, the GPUs, the CPU."""

    #: "auto" or a GPU backend of `wattwise.devices.backend_choices()` ("nvml", "simulated", "agent", ...).
    #: "auto": `$WATTWISE_BACKEND` when set (the same values, for every entry point at once), else NVML when
    #: an NVIDIA GPU is present, else amdsmi when an AMD GPU is, else no GPU and the CPU through RAPL when
    #: readable (tuning and capping need a GPU); the simulated GPU only when asked for by name.
    backend: str = "auto"
    #: GPU indices to use (after CUDA_VISIBLE_DEVICES); None: the process's own GPU under distributed
    #: training (its local rank), else all visible GPUs.
    gpus: list[int] | None = None
    #: Also measure CPU packages and DRAM through RAPL.
    cpu: bool = False
    simulated: SimulatedGPUConfig = field(default_factory=SimulatedGPUConfig)
    #: The simulated GPU's physics: "realistic" (a counter that advances every 100 ms, reads that take time,
    #: settings that settle, noise, GPUs that differ, as measured on an H100) or "ideal" (exact figures, for
    #: tests). None: `$WATTWISE_SIMULATED_PHYSICS`, else realistic. `$WATTWISE_SIMULATED_SEED` fixes the noise.
    simulated_physics: str | None = None
    #: The GPU generation the realistic simulated GPU stands for: "h100" (the default), "a100", "v100" or
    #: "mi300x", each with its clocks, counter period, power reading, read cost and settling (cited in
    #: docs/concepts.md). None: `$WATTWISE_SIMULATED_GPU`, else h100.
    simulated_gpu: str | None = None
    #: What drives the simulated GPU's load: "off" (only emulated work, `wattwise.tools.workload`) or "steps"
    #: (the training steps themselves: each step's wall time is its work at the maximum limit, stretched as
    #: the power model says). Off by default, because "steps" makes training sleep at lower limits.
    simulated_drive: str = "off"


@dataclass
class MonitorConfig:
    """How energy is read: CUDA synchronisation before reads, and background power sampling."""

    #: Synchronise CUDA before reading counters, so a window contains the work it launched.
    sync_cuda: bool = True
    #: Sample power in the background (for plots, reports and GPUs without an energy counter).
    sample_power: bool = True
    #: Seconds between power samples.
    sample_interval_s: float = 0.1


@dataclass
class PowerLimitConfig:
    """The power-limit mode (measure, tune or cap) and how tuning profiles and chooses."""

    #: "measure" (change nothing), "tune" (profile limits, apply the best) or "cap" (a fixed cap).
    mode: RunMode = RunMode.MEASURE
    #: Tuning objective: "energy", "time", "cost" (Zeus: eta*E + (1-eta)*MaxPower*T) or "slowdown".
    selector: Selector = Selector.COST
    #: Weight of energy against time in the cost: 1 = energy only, 0 = time only.
    eta: float = 0.5
    #: For selector "slowdown": the largest step-time increase allowed, as a fraction (0.1 = 10%).
    max_slowdown: float = 0.1
    #: Steps left untouched at the start (data loading, compilation).
    wait_steps: int = 2
    #: Steps run at each power limit before it is measured, for each step of the profiled limits that the
    #: change moved (a round measuring a limit again starts several limits away, and settles longer).
    warmup_steps: int = 2
    #: Steps measured at each power limit.
    profile_steps: int = 5
    #: The most a limit is measured for, in seconds, in consecutive windows of at least 5 counter updates,
    #: each only as long as the limit's cost needs to be told from the best one's. None: 20 updates of the
    #: GPUs' energy counter and at least 2 s (2 s where it updates 10 times a second, as measured on an
    #: H100; no minimum for the ideal simulated GPU, whose counter is exact).
    min_profile_s: float | None = None
    #: Rounds of measuring again, after every limit is profiled, the limits whose ranking a repeat of their
    #: windows could change (on a GPU whose energy counter is coarse; never with exact figures). 0: none.
    confirm_rounds: int = 2
    #: The downward sweep stops once this many limits in a row cost more than the best one by more than
    #: their uncertainty (lower limits only run slower). 0: profile every limit.
    stop_after_worse: int = 2
    #: Distance between profiled limits, from the maximum down to the minimum, in watts.
    step_w: float = 25.0
    #: Mode "cap": the cap in watts, or ...
    cap_w: float | None = None
    #: ... a fraction of the maximum limit (e.g. 0.7).
    cap_fraction: float | None = None
    #: Reuse the limit a previous run of the same job chose (needs `job`), without profiling again.
    reuse: bool = True


@dataclass
class CarbonConfig:
    """The carbon-aware power limit: the time- or energy-optimal limit by grid carbon intensity."""

    #: Switch between the time-optimal and the energy-optimal limit by grid carbon intensity.
    aware: bool = False
    #: Intensity (gCO2e/kWh) at and above which the energy-optimal limit is used.
    threshold_g_per_kwh: float = 300.0
    #: The intensity as `wattwise report --intensity` takes it: a number (gCO2e/kWh), a CSV `timestamp,value`
    #: file, or a code of the bundled table of yearly averages (`DE`, `gcp:europe-west1`, `aws:eu-west-1`).
    intensity: str | None = None
    #: CSV `timestamp,value` of intensity (gCO2e/kWh), or a constant via `intensity_g_per_kwh`.
    intensity_csv: str | None = None
    #: A constant intensity (gCO2e/kWh), used when no `intensity_csv` is given.
    intensity_g_per_kwh: float | None = None
    #: How often the intensity is re-checked, in seconds.
    interval_s: float = 900.0


@dataclass
class EnergyConfig:
    """Everything one run of the energy plugin needs."""

    #: A name for this training job: tuning results are saved and reused under it.
    job: str | None = None
    #: The project the run belongs to, in its summary and the run history (`wattwise runs list --project`).
    #: None: the working directory's git root's name, else its folder's (`wattwise.project`).
    project: str | None = None
    #: Where the end-of-run summary (summary.json, windows.csv, power.csv) is written.
    output_dir: str = "wattwise_runs"
    #: Raise instead of degrading to measurement-only when a setting cannot be applied.
    strict: bool = False
    #: Log step metrics every N steps (epoch and fit metrics are always logged). None: the Lightning
    #: Trainer's own `log_every_n_steps` (50 by default); 50 under Accelerate.
    log_every_n_steps: int | None = None
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    power_limit: PowerLimitConfig = field(default_factory=PowerLimitConfig)
    carbon: CarbonConfig = field(default_factory=CarbonConfig)

    def described_as(self, name: str) -> str:
        """`name(mode=..., eta=..., job=..., backend=...)`: the settings that say what a run does (a `repr`)."""
        pl = self.power_limit
        return f"{name}(mode={str(pl.mode)!r}, eta={pl.eta!r}, job={self.job!r}, backend={self.devices.backend!r})"


@dataclass(frozen=True)
class Setting:
    """A setting given by name: `EnergyCallback(<name>=...)`, `ACCELERATE_ENERGY_<NAME>`, a CLI flag."""

    name: str
    #: Its dotted key in `EnergyConfig`.
    key: str
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "mode",
        "power_limit.mode",
        f"{', '.join(RunMode)}: change nothing, profile power limits and keep the best, or a fixed cap",
    ),
    Setting(
        "selector",
        "power_limit.selector",
        f"tuning objective: {', '.join(Selector)} "
        "(cost = eta*E + (1-eta)*MaxPower*T; slowdown: least energy within max_slowdown)",
    ),
    Setting("eta", "power_limit.eta", "weight of energy against time in the cost, 0..1 (1: energy only)"),
    Setting(
        "max_slowdown",
        "power_limit.max_slowdown",
        "selector slowdown: the largest step-time increase accepted, e.g. 0.1 for 10%",
    ),
    Setting("cap_w", "power_limit.cap_w", "mode cap: the cap in watts"),
    Setting("cap_fraction", "power_limit.cap_fraction", "mode cap: the cap as a fraction of the maximum limit"),
    Setting("job", "job", "a name for this training job: a tuned limit is saved and reused under it"),
    Setting("output_dir", "output_dir", "where summary.json, windows.csv and power.csv are written"),
    Setting("strict", "strict", "raise instead of degrading to measurement only"),
    Setting(
        "backend",
        "devices.backend",
        f"devices: {', '.join(backend_choices())} (auto: ${BACKEND_ENV} if set, else NVML, else amdsmi, "
        "else the CPU through RAPL)",
    ),
    Setting(
        "log_every_n_steps",
        "log_every_n_steps",
        "log step metrics every N steps (default: the Lightning Trainer's; 50 under Accelerate)",
    ),
)
SETTING: dict[str, Setting] = {s.name: s for s in SETTINGS}
#: A setting's value as given by name (each is a bool, a number or a string; None: not given).
SettingScalar = bool | int | float | str | None
#: Settings nested by their keys (`power_limit.cap_w` -> `{"power_limit": {"cap_w": ...}}`), for `load_config`.
SettingTree = dict[str, "SettingScalar | SettingTree"]
#: The two ways to reach every other key, beside the settings above.
CONFIG_HELP = "an OmegaConf YAML with any other setting (configs/energy.yaml lists every key)"
OVERRIDES_HELP = "dotlist overrides applied last, e.g. power_limit.profile_steps=10"


def setting_values(given: Mapping[str, SettingScalar]) -> SettingTree:
    """The nested `values` of `load_config` for settings given by name; None means not given."""
    values: SettingTree = {}
    for name, value in given.items():
        if value is None:
            continue
        *parents, leaf = SETTING[name].key.split(".")
        node = values
        for part in parents:
            node = typing.cast(SettingTree, node.setdefault(part, {}))  # made here: a table of settings
        node[leaf] = value
    return values


#: Settings that name a folder: a `pathlib.Path` is as good as a string.
_PATH_SETTINGS = frozenset({"output_dir"})
_KINDS = {bool: "True or False", int: "a whole number", float: "a number", str: "a string"}


def _spelled(owner: str, names: Mapping[str, str], name: str, value: Any) -> str:
    """How the user gave a setting: `EnergyCallback(cap_w=200)`, or its variable `ACCELERATE_ENERGY_CAP_W=200`."""
    return f"{names[name]}={value}" if name in names else f"{owner}({name}={value!r})"


def refuse_positional(owner: str, args: tuple[Any, ...]) -> None:
    """Refuse positional arguments to a callback or plugin whose settings are keyword arguments only.

    Raises:
        ConfigError: `args` is not empty; the message names the first one and how to pass it.
    """
    if args:
        raise ConfigError(
            f"{owner} takes keyword arguments only (got {args[0]!r} in position 1); name each "
            f"setting, e.g. {owner}(mode='tune', output_dir='wattwise_runs')"
        )


def overrides_list(owner: str, value: object, names: Mapping[str, str] | None = None) -> list[str]:
    """The dotlist overrides of a callback or plugin argument: a list of `key=value` strings, or one string.

    A string holds one override or several separated by whitespace (quoted as in a shell), as the
    `*_OVERRIDES` variables do.

    Raises:
        ConfigError: `value` is neither; the message names the argument and shows both forms.
    """
    names = names or {}
    if value is None:
        return []
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as err:
            raise ConfigError(
                f"{_spelled(owner, names, 'overrides', value)}: overrides must be key=value items "
                f"separated by spaces ({err})"
            ) from None
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return list(value)
    raise ConfigError(
        f"{_spelled(owner, names, 'overrides', value)}: overrides must be a list of key=value "
        "strings or one string, e.g. overrides=['power_limit.profile_steps=3'] or "
        "overrides='power_limit.profile_steps=3 power_limit.step_w=50'"
    )


def check_setting_types(
    owner: str, given: Mapping[str, Any], names: Mapping[str, str] | None = None
) -> dict[str, SettingScalar]:
    """Refuse a setting given by name with a value of the wrong type, before OmegaConf converts it silently.

    Args:
        owner: what took the settings, for the message (`EnergyCallback`, `EnergyPlugin`).
        given: settings by name; None means not given.
        names: how a setting was given when not as an argument (its environment variable).

    Returns:
        `given` with each path setting given as a `pathlib.Path` turned into a string.

    Raises:
        ConfigError: `output_dir=3`, `eta="0.5"`, `strict=1`, ...; the message names the argument and the type.
    """
    names = names or {}
    checked: dict[str, SettingScalar] = {}
    for name, value in given.items():
        if value is not None and name in _PATH_SETTINGS and isinstance(value, os.PathLike):
            value = os.fspath(value)
        if value is not None:
            kind = key_type(SETTING[name].key)
            ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                ok = True
            if not ok:
                default = _enum_values(default_of(SETTING[name].key))
                example = f", e.g. {name}={default!r}" if default is not None else ""
                raise ConfigError(
                    f"{_spelled(owner, names, name, value)}: {name} must be {_KINDS[kind]} "
                    f"({SETTING[name].help}){example}"
                )
        checked[name] = value
    return checked


def check_cap_given(
    owner: str, cfg: EnergyConfig, given: Mapping[str, Any], names: Mapping[str, str] | None = None
) -> None:
    """Refuse a cap (`cap_w`, `cap_fraction`) given by name to a run whose mode is not "cap": it would be ignored.

    Raises:
        ConfigError: the message names the cap as given and the two fixes.
    """
    names = names or {}
    mode = cfg.power_limit.mode
    for name in ("cap_w", "cap_fraction"):
        value = given.get(name)
        if value is not None and mode != RunMode.CAP:
            set_mode = names["mode"] + "=cap" if "mode" in names else "mode='cap'"
            raise ConfigError(
                f"{_spelled(owner, names, name, value)} is a cap, which applies only in mode 'cap' "
                f"(the mode is {str(mode)!r}); set {set_mode} to cap the power, "
                f"or leave {names.get(name, name)} out"
            )


def arguments_config(
    owner: str, given: Mapping[str, Any], *, config: object = None, overrides: object = None
) -> EnergyConfig:
    """The validated `EnergyConfig` of a callback's keyword arguments (the Lightning and HF Trainer callbacks).

    Args:
        owner: the callback's name, for the messages.
        given: the `SETTINGS` by name; None means not given.
        config: a YAML file with any other key (a path).
        overrides: dotlist overrides, a list of `key=value` strings or one string of them (see `overrides_list`).

    Raises:
        ConfigError: an argument of the wrong type or value, a cap outside mode "cap"; named as the user wrote it.
    """
    settings = check_setting_types(owner, given)
    items = overrides_list(owner, overrides)
    if config is not None and not isinstance(config, str | os.PathLike):
        raise ConfigError(
            f"{owner}(config={config!r}): config must be the path of a YAML file, e.g. config='configs/energy.yaml'"
        )
    cfg = load_config([config] if config else [], items, setting_values(settings))
    check_cap_given(owner, cfg, settings)
    return cfg


def config_keys(cls: type = EnergyConfig, prefix: str = "") -> list[str]:
    """Every leaf key of `cls` (a config dataclass), dotted, in declaration order."""
    hints = typing.get_type_hints(cls)
    keys: list[str] = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            keys += config_keys(typing.cast(type, kind), f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def key_type(key: str) -> type:
    """The type a user gives a leaf key, without its `None` (`power_limit.cap_w` -> float, `devices.gpus` -> list).

    A closed set's key (`power_limit.mode`) takes one of its words: `str`.
    """
    cls: Any = EnergyConfig
    for part in key.split("."):
        cls = typing.get_type_hints(cls)[part]
    if isinstance(cls, types.UnionType):
        cls = next(a for a in typing.get_args(cls) if a is not type(None))
    if isinstance(cls, type) and issubclass(cls, enum.StrEnum):
        return str
    origin = typing.get_origin(cls)
    return typing.cast(type, origin or cls)


def default_of(key: str) -> Any:
    """The default of a leaf key."""
    node: Any = EnergyConfig()
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _key_of(err: OmegaConfBaseException) -> str:
    full_key = getattr(err, "full_key", None)
    return str(full_key) if full_key else "?"


def load_config(
    yaml_paths: Iterable[str | os.PathLike[str]] = (),
    overrides: Iterable[str] = (),
    values: Mapping[str, Any] | None = None,
) -> EnergyConfig:
    """Defaults, then each YAML file, then `values` (a nested mapping), then dotlist `overrides`."""
    schema = _schema()
    layers: list[Any] = []
    try:
        layers.extend(_load_yaml(path) for path in yaml_paths)
        if values:
            layers.append(OmegaConf.create(dict(values)))
        overrides = list(overrides)
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} must look like key=value, e.g. power_limit.eta=0.3")
            try:
                OmegaConf.from_dotlist([item])
            except yaml.YAMLError as err:
                first = str(err).splitlines()[0]
                raise ConfigError(
                    f"override {item!r}: the value is not valid YAML ({first}); quote it or close "
                    "its brackets, e.g. devices.gpus=[0,1]"
                ) from None
        if overrides:
            layers.append(OmegaConf.from_dotlist(overrides))
        for layer in layers:
            _check_sections(schema, layer, "")
        merged = OmegaConf.merge(schema, *layers)
        cfg = OmegaConf.to_object(merged)
    except ConfigError:
        raise
    except OmegaConfBaseException as err:
        raise _explain(err) from None
    assert isinstance(cfg, EnergyConfig)
    if cfg.devices.simulated_drive in ("False", "false"):  # YAML 1.1 reads an unquoted `off` as false
        cfg.devices.simulated_drive = "off"
    validate(cfg)
    return cfg


@functools.cache
def _schema() -> Any:
    """The defaults as OmegaConf's typed schema, built once per process.

    Building it takes about 8 ms, more than the rest of a load; it is read-only, and each merge copies it.
    """
    schema = OmegaConf.structured(EnergyConfig)
    OmegaConf.set_readonly(schema, True)
    return schema


#: The config file as errors name it: an entry point shows it as its own option or variable.
CONFIG_FILE = Key("config", "config file")


def _load_yaml(path: str | os.PathLike[str]) -> Any:
    """One YAML file as a config layer; a file that is not a UTF-8 YAML mapping is a `ConfigError` naming it."""
    name = repr(os.fspath(path))
    if not os.path.isfile(path):
        path = _installed(os.fspath(path), name)
    what = (CONFIG_FILE, f" {name}")
    text = read_text(path, what=what, expected="YAML", fix="save it as UTF-8 YAML", error=ConfigError)
    try:
        layer = OmegaConf.load(io.StringIO(text))
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0]
        raise ConfigError(*what, f" is not valid YAML: {first}") from None
    except OSError:  # OmegaConf's answer to a top level that is neither a mapping nor a list
        layer = None
    if not OmegaConf.is_dict(layer):
        raise ConfigError(
            *what,
            " must hold a mapping of keys at its top level, e.g. `power_limit: {eta: 0.5}` (see configs/energy.yaml)",
        )
    return layer


#: The package folder holding the configuration files that ship with wattwise (`tune.yaml`, ...).
INSTALLED_CONFIGS = "configs"


def installed_configs_folder() -> Path:
    """The folder of the configuration files installed with wattwise, wherever it is installed."""
    return Path(str(resources.files("wattwise").joinpath(INSTALLED_CONFIGS)))


def config_names() -> list[str]:
    """The names of the configuration files installed with wattwise, sorted."""
    return sorted(p.name for p in installed_configs_folder().glob("*.yaml"))


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
    path = installed_configs_folder() / file
    if "/" in name or not path.is_file():
        raise UsageError(f"no installed configuration named {name!r}; installed: {', '.join(config_names())}")
    return path


def _installed(path: str, name: str) -> str:
    """A bare file name that is no file here names a configuration installed with wattwise (`tune.yaml`)."""
    if (
        os.sep not in path
        and os.path.splitext(path)[1] in ("", ".yaml")
        and (f"{path.removesuffix('.yaml')}.yaml" in config_names())
    ):
        return str(installed_config(path))
    raise ConfigError(
        CONFIG_FILE,
        f" {name} not found (or not a file); give a path, or the name of an installed "
        f"configuration: {', '.join(config_names())}",
    )


def _check_sections(schema: Any, layer: Any, prefix: str) -> None:
    """A scalar or list where the schema has a section (`power_limit: 250`) names the section."""
    if not OmegaConf.is_dict(layer):
        return
    for key in layer:
        if key not in schema:
            continue
        path = f"{prefix}{key}"
        if OmegaConf.is_dict(schema[key]):
            value = layer[key]
            if value is not None and not OmegaConf.is_dict(value):
                raise ConfigError(
                    f"config key {path!r} is a section; set its fields instead, "
                    f"e.g. {path}.<field>=<value> (see configs/energy.yaml)"
                )
            _check_sections(schema[key], value, f"{path}.")


def _explain(err: OmegaConfBaseException) -> ConfigError:
    """OmegaConf's error as one line naming the key."""
    key = _key_of(err)
    text = str(err).splitlines()[0]
    if "Key" in text and "not in" in text:
        return ConfigError(f"unknown config key {key!r}; check the spelling against configs/energy.yaml")
    if "Missing mandatory value" in text:
        return ConfigError("config key '", Key(key), "' needs a value")
    words, given = _enum_words(err), re.match(r"Invalid value '(.*)', expected one of", text)
    if words is not None and given is not None:
        return ConfigError(Key(key), f" must be one of {', '.join(words)} (got {given.group(1)!r})")
    return ConfigError("config key '", Key(key), f"': {text}")


def _enum_words(err: OmegaConfBaseException) -> tuple[str, ...] | None:
    """The words of the closed set a field takes, when `err` refused a value outside it (else None)."""
    owner, name = getattr(err, "object_type", None), getattr(err, "key", None)
    if not isinstance(owner, type) or not dataclasses.is_dataclass(owner) or not isinstance(name, str):
        return None
    kind = typing.get_type_hints(owner).get(name)
    return tuple(kind) if isinstance(kind, type) and issubclass(kind, enum.StrEnum) else None


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(Key(key), f" must be one of {', '.join(allowed)} (got {value!r})")


def _positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(Key(key), f" must be {'>= 0' if allow_zero else '> 0'} (got {value})")


def _count(key: str, value: object, *, minimum: int, maximum: int = MAX_COUNT) -> None:
    """A whole number in [minimum, maximum]: a float such as 1e29 or 2.5 for a count is refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(Key(key), f" must be a whole number (got {value!r})")
    _positive(key, value, allow_zero=minimum == 0)
    if value > maximum:
        raise ConfigError(Key(key), f" must be at most {maximum} (got {value})")


def _within(key: str, value: float, low: float, high: float, unit: str) -> None:
    """A positive finite number in [low, high] (`low` > 0): a value near 0 or 1e29 would hang or mislead."""
    _positive(key, value)
    if not low <= value <= high:
        raise ConfigError(Key(key), f" must be between {low:g} and {high:g} {unit} (got {value})")


GPUS = Key("devices.gpus")


def _check_gpus(devices: DevicesConfig) -> None:
    """`devices.gpus`: distinct GPU indices from 0; on the simulated GPU, fewer than `devices.simulated.num_gpus`.

    A real backend refuses an index it does not see when it opens the GPUs; the simulated one would make
    any GPU it is asked for (a "gpu-1"), so its count bounds the indices here.
    """
    if devices.gpus is None:
        return
    gpus = list(devices.gpus)
    if len(set(gpus)) != len(gpus) or any(isinstance(i, bool) or i < 0 for i in gpus):
        raise ConfigError(
            GPUS,
            " must list distinct GPU indices from 0, as numbered after CUDA_VISIBLE_DEVICES, e.g. ",
            GPUS,
            f"=[0,1] (got {gpus})",
        )
    simulated = devices.backend == "simulated" or (
        devices.backend == "auto" and os.environ.get(BACKEND_ENV, "").strip() == "simulated"
    )
    count = devices.simulated.num_gpus
    if simulated and gpus and max(gpus) >= count:
        num_gpus = Key("devices.simulated.num_gpus")
        raise ConfigError(
            GPUS,
            f" asks for GPU {max(gpus)}, but the simulated GPUs are 0 to {count - 1} (",
            num_gpus,
            f"={count}); pick among them or raise ",
            num_gpus,
        )


MODE = Key("power_limit.mode")
AWARE = Key("carbon.aware")


def validate(cfg: EnergyConfig) -> None:
    """Value checks OmegaConf's type checks cannot do. Raises `ConfigError` naming the key."""
    if cfg.job is not None:
        check_job_name(cfg.job, setting=Key("job"), error=ConfigError)
    _choice("devices.backend", cfg.devices.backend, backend_choices())
    _choice("devices.simulated_drive", cfg.devices.simulated_drive, SIMULATED_DRIVES)
    _count("devices.simulated.num_gpus", cfg.devices.simulated.num_gpus, minimum=1, maximum=MAX_GPUS)
    _check_gpus(cfg.devices)
    if cfg.devices.simulated_physics is not None:
        _choice("devices.simulated_physics", cfg.devices.simulated_physics, tuple(p.value for p in PhysicsName))
    if cfg.devices.simulated_gpu is not None:
        _choice("devices.simulated_gpu", cfg.devices.simulated_gpu, tuple(g.value for g in SimulatedGpuName))
    _within("devices.simulated.base_step_time_s", cfg.devices.simulated.base_step_time_s, 1e-6, 3600.0, "seconds")
    _within("monitor.sample_interval_s", cfg.monitor.sample_interval_s, 1e-3, 86400.0, "seconds")
    if cfg.log_every_n_steps is not None:
        _count("log_every_n_steps", cfg.log_every_n_steps, minimum=1)
    pl = cfg.power_limit
    _choice("power_limit.mode", pl.mode, tuple(RunMode))
    _choice("power_limit.selector", pl.selector, tuple(Selector))
    if not (0.0 <= pl.eta <= 1.0):
        raise ConfigError(
            Key("power_limit.eta"), f" must be between 0 and 1 (got {pl.eta}); 1 minimises energy, 0 minimises time"
        )
    _positive("power_limit.max_slowdown", pl.max_slowdown, allow_zero=True)
    _count("power_limit.wait_steps", pl.wait_steps, minimum=0)
    _count("power_limit.warmup_steps", pl.warmup_steps, minimum=0)
    _count("power_limit.profile_steps", pl.profile_steps, minimum=1)
    if pl.min_profile_s is not None:
        _positive("power_limit.min_profile_s", pl.min_profile_s, allow_zero=True)
        if pl.min_profile_s > 3600.0:
            raise ConfigError(
                Key("power_limit.min_profile_s"), f" must be at most 3600 seconds (got {pl.min_profile_s})"
            )
    _count("power_limit.confirm_rounds", pl.confirm_rounds, minimum=0, maximum=10)
    _count("power_limit.stop_after_worse", pl.stop_after_worse, minimum=0, maximum=MAX_PROFILED_LIMITS)
    _within("power_limit.step_w", pl.step_w, MIN_STEP_W, MAX_POWER_W, "watts")
    if pl.mode == RunMode.CAP:
        if (pl.cap_w is None) == (pl.cap_fraction is None):
            raise ConfigError(
                MODE,
                "=cap needs exactly one of ",
                Key("power_limit.cap_w"),
                " (watts) or ",
                Key("power_limit.cap_fraction"),
                " (of the maximum limit, e.g. 0.7)",
            )
        if pl.cap_w is not None:
            _within("power_limit.cap_w", pl.cap_w, 1.0, MAX_POWER_W, "watts")
        if pl.cap_fraction is not None and not (0.0 < pl.cap_fraction <= 1.0):
            raise ConfigError(Key("power_limit.cap_fraction"), f" must be in (0, 1] (got {pl.cap_fraction})")
    c = cfg.carbon
    _positive("carbon.threshold_g_per_kwh", c.threshold_g_per_kwh, allow_zero=True)
    if c.intensity is not None:
        _check_intensity(c.intensity)
    if c.aware:
        if pl.mode != RunMode.TUNE:
            raise ConfigError(
                AWARE,
                "=true needs ",
                MODE,
                "=tune (it switches between the time- and energy-optimal limits of the tuning profile)",
            )
        if [c.intensity, c.intensity_csv, c.intensity_g_per_kwh].count(None) != 2:
            raise ConfigError(
                AWARE,
                "=true needs exactly one of ",
                Key("carbon.intensity"),
                " (a number, a CSV file or a code of the bundled table such as DE), ",
                Key("carbon.intensity_csv"),
                " or ",
                Key("carbon.intensity_g_per_kwh"),
            )
        _positive("carbon.interval_s", c.interval_s)


def _check_intensity(text: str) -> None:
    """`carbon.intensity` as `--intensity` reads it (a file is read when the run starts), named in the error."""
    from wattwise.carbon.series import INTENSITY, parse_series  # only when the key is set

    if Path(text).is_file():
        return
    key = "carbon.intensity"
    try:
        parse_series(text, INTENSITY.setting(key))
    except UsageError as err:
        raise ConfigError(Key(key), str(err).removeprefix(key)) from None


def to_yaml(cfg: EnergyConfig) -> str:
    """The YAML a user would write to get `cfg`."""
    plain = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=False)
    return OmegaConf.to_yaml(OmegaConf.create(_enum_values(plain)))


def _enum_values(node: Any) -> Any:
    """`node` with each closed-set word as its plain string: YAML keeps the words users write."""
    if isinstance(node, enum.Enum):
        return node.value
    if isinstance(node, dict):
        return {k: _enum_values(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_enum_values(v) for v in node]
    return node


__all__ = [
    "CONFIG_HELP",
    "OVERRIDES_HELP",
    "SETTING",
    "SETTINGS",
    "CarbonConfig",
    "DevicesConfig",
    "EnergyConfig",
    "MonitorConfig",
    "PowerLimitConfig",
    "Setting",
    "SimulatedGPUConfig",
    "arguments_config",
    "check_cap_given",
    "check_setting_types",
    "config_keys",
    "default_of",
    "key_type",
    "load_config",
    "overrides_list",
    "refuse_positional",
    "setting_values",
    "to_yaml",
    "validate",
]
