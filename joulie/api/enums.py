"""Closed vocabularies of the Joulie API.

Values are the wire strings. ``ControlResult`` is deliberately not enumerated in the CRDs (the spec
keeps the cap and governor results open), but components only ever write the values listed here.
"""

from __future__ import annotations

from enum import StrEnum


class Profile(StrEnum):
    """Power profile of a node (NodeTwin.spec.profile, node label joulie.io/power-profile)."""

    PERFORMANCE = "performance"
    ECO = "eco"


class WorkloadClass(StrEnum):
    """Placement intent of a pod (annotation joulie.io/workload-class)."""

    PERFORMANCE = "performance"
    STANDARD = "standard"


class SchedulableClass(StrEnum):
    """What the scheduler extender sees for a node (NodeTwin.status.schedulableClass)."""

    PERFORMANCE = "performance"
    ECO = "eco"
    DRAINING = "draining"


class CpuGovernorPreset(StrEnum):
    PERFORMANCE = "performance"
    BALANCED = "balanced"
    EFFICIENCY = "efficiency"


class GpuGovernorPreset(StrEnum):
    AUTO = "auto"
    SUSTAINED = "sustained"
    EFFICIENT = "efficient"
    LOW = "low"
    PEAK = "peak"


class Boost(StrEnum):
    ON = "on"
    OFF = "off"


class GpuCapScope(StrEnum):
    PER_GPU = "perGpu"


class ControlResult(StrEnum):
    """Outcome of one control attempt (caps and governors), reported by the agent."""

    APPLIED = "applied"
    APPLIED_UNVERIFIED = "applied-unverified"
    EQUIVALENT = "equivalent"
    UNSUPPORTED = "unsupported"
    NOT_APPLIED = "not-applied"
    REFUSED = "refused"
    DRIFT = "drift"
    CONTENDED = "contended"
    DISABLED = "disabled"
    RESTORED = "restored"
    ERROR = "error"


class DiscoveryQuality(StrEnum):
    """NodeHardware.status.quality.overall."""

    EXACT = "exact"
    HEURISTIC = "heuristic"
    UNAVAILABLE = "unavailable"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class GovernorControl(StrEnum):
    """Which governor presets the controller manager writes (GOVERNOR_CONTROL)."""

    OFF = "off"
    CPU = "cpu"
    GPU = "gpu"
    ALL = "all"


class NodePowerSource(StrEnum):
    """Where the controller manager reads each node's measured power (NODE_POWER_SOURCE)."""

    STATIC = "static"
    HTTP = "http"
    PROMETHEUS = "prometheus"
    # Reserved by the spec: named, but nothing produces them yet.
    KEPLER = "kepler"
    UTILIZATION = "utilization"


RESERVED_POWER_SOURCES = frozenset({NodePowerSource.KEPLER, NodePowerSource.UTILIZATION})


class TelemetryBackend(StrEnum):
    """Agent telemetry/control backend (TELEMETRY_{CPU,GPU}_{SOURCE,CONTROL})."""

    HOST = "host"
    HTTP = "http"
