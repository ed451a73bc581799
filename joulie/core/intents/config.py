"""The controller-manager settings the intents depend on, as plain validated values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from joulie.api.enums import (
    CpuGovernorPreset,
    GovernorControl,
    GpuGovernorPreset,
)
from joulie.api.keys import DEFAULT_GPU_PRODUCT_LABEL_KEYS

NO_PRESET: Final = ""
"""A configured preset of "" writes no preset (the agent keeps or restores the node's own)."""

_MIN_WATTS: Final = 1.0  # the API's floor for any watts field

CapRange = tuple[float, float]
"""A per-GPU power-limit range ``(min_watts, max_watts)``."""

CpuPresetChoice = CpuGovernorPreset | Literal[""]
GpuPresetChoice = GpuGovernorPreset | Literal[""]


@dataclass(frozen=True)
class GpuModelGovernor:
    """One entry of GPU_GOVERNOR_MODEL_PRESETS_JSON (``GpuGovernorModelPreset`` in settings).

    For each preset field ``None`` means the entry does not set it (the configured default
    applies) and ``""`` means the model gets no GPU preset at that profile.
    """

    performance: GpuPresetChoice | None = None
    eco: GpuPresetChoice | None = None
    compute_clock_ceiling_pct_of_max: float | None = None

    def __post_init__(self) -> None:
        for name in ("performance", "eco"):
            _check_choice(getattr(self, name), GpuGovernorPreset, name, allow_none=True)
        _check_pct(self.compute_clock_ceiling_pct_of_max, "compute_clock_ceiling_pct_of_max")


@dataclass(frozen=True)
class IntentConfig:
    """The controller-manager settings the intents depend on; defaults equal the settings'.

    Built from ``ManagerSettings`` field by field (same names unless noted):

    * ``performance_cap_watts`` <- PERFORMANCE_CAP_WATTS
    * ``cpu_performance_cap_pct_of_max`` / ``cpu_eco_cap_pct_of_max``,
      ``gpu_performance_cap_pct_of_max`` / ``gpu_eco_cap_pct_of_max``,
      ``cpu_eco_cap_on_uncappable_gpu_nodes`` <- the variables of the same names
    * ``gpu_model_caps`` <- ``gpu_model_caps_json``: ``{key: (min_cap_watts, max_cap_watts)}``
    * ``gpu_product_label_keys`` <- ``gpu_product_label_keys`` (as a tuple)
    * ``governor_control`` <- GOVERNOR_CONTROL
    * ``{cpu,gpu}_{performance,eco}_governor_preset`` <- the variables of the same names, as the
      enum member, or ``""`` for an empty variable (no preset)
    * ``gpu_clock_ceiling_pct_of_max`` <- ``gpu_eco_clock_ceiling_pct_of_max``
    * ``gpu_model_governors`` <- ``gpu_governor_model_presets()`` (the usable fields of each
      entry), each as a :class:`GpuModelGovernor`
    * ``gpu_governor_sustained_only_multi_gpu`` <- the variable of the same name
    """

    performance_cap_watts: float = 5000.0
    cpu_performance_cap_pct_of_max: float = 100.0
    cpu_eco_cap_pct_of_max: float = 60.0
    gpu_performance_cap_pct_of_max: float = 100.0
    gpu_eco_cap_pct_of_max: float = 60.0
    cpu_eco_cap_on_uncappable_gpu_nodes: bool = False
    gpu_model_caps: Mapping[str, CapRange] = field(default_factory=dict)
    gpu_product_label_keys: tuple[str, ...] = DEFAULT_GPU_PRODUCT_LABEL_KEYS
    governor_control: GovernorControl = GovernorControl.OFF
    cpu_performance_governor_preset: CpuPresetChoice = CpuGovernorPreset.PERFORMANCE
    cpu_eco_governor_preset: CpuPresetChoice = CpuGovernorPreset.EFFICIENCY
    gpu_performance_governor_preset: GpuPresetChoice = GpuGovernorPreset.AUTO
    gpu_eco_governor_preset: GpuPresetChoice = GpuGovernorPreset.EFFICIENT
    gpu_clock_ceiling_pct_of_max: float = 80.0
    gpu_model_governors: Mapping[str, GpuModelGovernor] = field(default_factory=dict)
    gpu_governor_sustained_only_multi_gpu: bool = False

    def __post_init__(self) -> None:
        if not self.performance_cap_watts >= _MIN_WATTS:
            raise ValueError(
                f"performance_cap_watts must be >= 1, got {self.performance_cap_watts}"
            )
        for name in (
            "cpu_performance_cap_pct_of_max",
            "cpu_eco_cap_pct_of_max",
            "gpu_performance_cap_pct_of_max",
            "gpu_eco_cap_pct_of_max",
            "gpu_clock_ceiling_pct_of_max",
        ):
            _check_pct(getattr(self, name), name)
        for key, (low, high) in self.gpu_model_caps.items():
            if not _MIN_WATTS <= low <= high:
                raise ValueError(
                    f"gpu_model_caps[{key!r}]: need 1 <= min <= max, got {low}..{high}"
                )
        _check_choice(self.governor_control, GovernorControl, "governor_control", allow_none=False)
        for name in ("cpu_performance_governor_preset", "cpu_eco_governor_preset"):
            _check_choice(getattr(self, name), CpuGovernorPreset, name, allow_none=False)
        for name in ("gpu_performance_governor_preset", "gpu_eco_governor_preset"):
            _check_choice(getattr(self, name), GpuGovernorPreset, name, allow_none=False)
            # The spec: no default selects sustained; only a model entry opts a model in.
            if getattr(self, name) == GpuGovernorPreset.SUSTAINED:
                raise ValueError(f"{name}: sustained is selected per GPU model only")


def _check_pct(value: float | None, name: str) -> None:
    if value is not None and not 0 < value <= 100:
        raise ValueError(f"{name} must be in (0, 100], got {value}")


def _check_choice(
    value: object,
    enum: type[CpuGovernorPreset | GpuGovernorPreset | GovernorControl],
    name: str,
    *,
    allow_none: bool,
) -> None:
    if value is None and allow_none:
        return
    if enum is not GovernorControl and value == NO_PRESET:
        return
    if value not in {member.value for member in enum}:
        raise ValueError(f"{name}: {value!r} is not one of {[m.value for m in enum]}")
