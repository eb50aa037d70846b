"""The power-limit part of a run: cap, tune or reuse a limit, through the settings guard.

It binds the pure tuner of `wattwise.power_limit` to the run's GPUs: the guard records each GPU's
original limit before the first change and restores it on every exit path; the limit a tuning run
chooses is remembered under the job's key (`wattwise.limits_memory`) and reused by the next run of the
same job. A carbon part, when configured, moves the limit after tuning. Its resumable state is the
tuner's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from wattwise.carbon.control import CarbonControl
from wattwise.config import PowerLimitConfig
from wattwise.devices import Device
from wattwise.distributed import Collective
from wattwise.guard import SettingsGuard
from wattwise.limits_memory import LimitsMemory
from wattwise.power_limit import PowerLimitTuner, cap_limit_w, profile_limits_w
from wattwise.record import PowerLimitSummary


class PowerLimitControl:
    """The power limit of one run's GPUs. Device errors propagate: the run degrades to measurement."""

    def __init__(self, cfg: PowerLimitConfig, *, memory: LimitsMemory | None = None,
                 wall_clock: Callable[[], float]) -> None:
        self.cfg = cfg
        #: "measure", "tune" or "cap"; "measure" again once a change failed.
        self.mode = cfg.mode
        self._memory = memory
        self._wall = wall_clock
        self.gpus: list[Device] = []
        self.guard: SettingsGuard | None = None
        self.tuner: PowerLimitTuner | None = None
        self.carbon: CarbonControl | None = None
        self.applied_limit_w: float | None = None
        #: The limit being applied, for the warning when applying it fails.
        self.target_w: float | None = None
        #: Every change: when, which device, which setting, what value.
        self.timeline: list[dict[str, Any]] = []
        #: The limit was chosen by an earlier run of the job and reused without profiling.
        self.reused = False
        self.steps_at_chosen = 0
        self._resumed_tuner: dict[str, Any] | None = None
        self._label: Callable[[Device], str] = lambda dev: dev.key

    @property
    def memory(self) -> LimitsMemory:
        if self._memory is None:
            self._memory = LimitsMemory()
        return self._memory

    def steer(self, *, power_limit_w: float | None, eta: float) -> None:
        """Before a recurring job's run starts: cap at the limit remembered for its batch size, or tune.

        Tuning then uses the job's own trade-off (the Zeus cost with the job's eta) and profiles afresh:
        the job store, not the per-job limits memory, knows which batch sizes were profiled.
        """
        cfg = self.cfg
        if power_limit_w is not None:
            cfg.mode, cfg.cap_w, cfg.cap_fraction = "cap", power_limit_w, None
        else:
            cfg.mode, cfg.reuse, cfg.selector, cfg.eta = "tune", False, "cost", eta
        self.mode = cfg.mode

    def setup(self, gpus: Sequence[Device], collective: Collective, *, memory_key: str | None,
              carbon: CarbonControl | None, label: Callable[[Device], str]) -> None:
        """Install the guard and apply the starting limit: the cap, or the start of tuning or a reused limit."""
        self.gpus, self._label = list(gpus), label
        if self.mode == "measure" or not self.gpus:
            return
        cfg = self.cfg
        self.guard = SettingsGuard()
        self.guard.install_signal_handlers()
        rng = self.gpus[0].power_limit_range()
        if self.mode == "cap":
            self.apply(cap_limit_w(rng.max_w, rng.min_w, cap_w=cfg.cap_w, cap_fraction=cfg.cap_fraction))
            return
        self.carbon = carbon
        self.tuner = PowerLimitTuner(
            profile_limits_w(rng.min_w, rng.max_w, cfg.step_w), selector=cfg.selector, eta=cfg.eta,
            max_slowdown=cfg.max_slowdown, max_power_w=rng.max_w * len(self.gpus) * collective.world_size,
            wait_steps=cfg.wait_steps, warmup_steps=cfg.warmup_steps, profile_steps=cfg.profile_steps)
        if self._resumed_tuner is not None:
            self.tuner.load_state_dict(self._resumed_tuner)
            return
        if cfg.reuse and memory_key is not None:
            saved = self.memory.load(memory_key) if collective.rank == 0 else None
            saved = collective.broadcast(saved)
            if saved is not None:
                chosen, profile = saved
                self.tuner.profile = profile
                self.tuner.finish_with(chosen)
                self.reused = True

    def apply(self, watts: float) -> None:
        assert self.guard is not None
        for gpu in self.gpus:
            self.guard.set_power_limit(gpu, watts)
        self.applied_limit_w = watts
        now = self._wall()
        for gpu in self.gpus:
            self.timeline.append({"timestamp": now, "device": self._label(gpu), "setting": "power_limit_w",
                                  "value": watts})

    def step_begin(self, collective: Collective) -> bool:
        """Apply the limit the tuner (or the carbon part) wants now; True when a profile window opens."""
        if self.tuner is None:
            return False
        action = self.tuner.on_step_begin()
        target = action.set_limit_w
        if self.tuner.done and self.carbon is not None:
            target = self.carbon.target_w(self.tuner.profile, collective)
        if target is not None and target != self.applied_limit_w:
            self.target_w = target
            self.apply(target)
        return action.begin_window

    def step_end(self) -> bool:
        """Count the step; True when the open profile window is complete and must be measured."""
        if self.tuner is None:
            return False
        if self.tuner.done:
            self.steps_at_chosen += 1
            return False
        return self.tuner.on_step_end()

    def record_profile(self, time_s: float, energy_j: float, *, memory_key: str | None, is_main: bool) -> None:
        """The profile window's figures (combined over processes); remember the choice once tuning ends."""
        assert self.tuner is not None
        self.tuner.record(time_s, energy_j)
        if self.tuner.done and self.tuner.chosen is not None and memory_key is not None and is_main:
            self.memory.save(memory_key, self.tuner.chosen, self.tuner.profile, selector=self.tuner.selector,
                             eta=self.tuner.eta)

    def epoch_end(self) -> bool:
        """True when an open profile window must be dropped (tuning never profiles across epochs)."""
        return self.tuner is not None and self.tuner.on_epoch_end()

    def degrade(self) -> None:
        """A change failed: restore every setting and only measure from now on."""
        self.mode = "measure"
        self.tuner = None
        self.restore()
        self.applied_limit_w = None

    def restore(self) -> None:
        if self.guard is not None:
            self.guard.restore_all()

    def close(self) -> None:
        if self.guard is not None:
            self.guard.close()

    def summary(self, energy_j: float) -> PowerLimitSummary | None:
        """What this part did, for the run's record; the saving is estimated against the highest limit."""
        if self.mode == "cap":
            return PowerLimitSummary(mode="cap", chosen_power_limit_w=self.applied_limit_w)
        if self.tuner is None:
            return None
        t = self.tuner
        top = max(t.profile, key=lambda e: e.power_limit_w) if t.profile else None
        saved = (self.steps_at_chosen * (top.energy_j - t.chosen.energy_j)
                 if t.chosen is not None and top is not None else None)
        return PowerLimitSummary(
            mode="tune", selector=t.selector, eta=t.eta, max_slowdown=self.cfg.max_slowdown, reused=self.reused,
            chosen_power_limit_w=t.chosen.power_limit_w if t.chosen else None, profile=tuple(t.profile),
            baseline_energy_j=energy_j + saved if saved is not None else None, energy_saved_j=saved,
            baseline_estimated=saved is not None)

    # -- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"tuner": self.tuner.state_dict() if self.tuner is not None else None,
                "applied_limit_w": self.applied_limit_w}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resumed_tuner = state.get("tuner")
        if self.tuner is not None and self._resumed_tuner is not None:
            self.tuner.load_state_dict(self._resumed_tuner)
