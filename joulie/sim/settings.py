"""Environment variables of the simulator role (telemetry/control service for KWOK nodes)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from joulie.api.keys import DEFAULT_GPU_PRODUCT_LABEL_KEYS, MANAGED_LABEL
from joulie.settings import (
    CommaList,
    Duration,
    EnvSettings,
    LabelSelectorText,
    ListenAddress,
    Problem,
)


class SimulatorSettings(EnvSettings):
    role = "simulator"

    sim_addr: ListenAddress = ":18080"
    """Where the simulator serves GET /telemetry/{node}, POST /control/{node} and /metrics."""
    sim_node_selector: LabelSelectorText = f"{MANAGED_LABEL}=true"
    """Label selector of the nodes the simulator stands in for."""
    sim_time_scale: Annotated[float, Field(gt=0, le=10_000)] = 1.0
    """Simulated seconds per wall-clock second; results depend only on the sequence of events
    in simulated time, not on how fast it runs."""
    sim_ambient_c: Annotated[float, Field(ge=-50, le=60)] = 22.0
    """Facility ambient temperature in degrees Celsius."""
    sim_power_settle: Duration = 2.0
    """Time constant with which node power follows a change of load or controls (simulated)."""
    hardware_catalog_path: str = ""
    """A hardware catalog file replacing the embedded one (empty: embedded catalog)."""
    sim_gpu_product_label_keys: CommaList = Field(
        default_factory=lambda: list(DEFAULT_GPU_PRODUCT_LABEL_KEYS)
    )
    """Node labels searched, in order, for a node's GPU product when no joulie.io hardware
    label or annotation names its GPU model; keep it equal to the manager's
    GPU_PRODUCT_LABEL_KEYS so both see the same hardware."""

    def check(self) -> list[Problem]:
        if not self.sim_gpu_product_label_keys:
            return [
                self.problem(
                    "sim_gpu_product_label_keys",
                    "names no label key",
                    "a comma-separated list of label keys",
                )
            ]
        return []
