"""Environment variables of the simulator role (telemetry/control service for KWOK nodes)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from joulie.api.keys import MANAGED_LABEL
from joulie.settings import Duration, EnvSettings, LabelSelectorText, ListenAddress


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
