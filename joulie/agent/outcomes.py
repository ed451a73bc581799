"""What one control pass did to a node's hardware: per component (a cap, a governor preset) one
result for NodeTwin ``controlStatus``, and the settings behind it, whichever device (sysfs, NVML)
they live on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from joulie.api.enums import ControlResult
from joulie.core.control import combine_results

__all__ = ["MESSAGE_SETTINGS", "ComponentOutcome", "SettingOutcome"]

MESSAGE_SETTINGS = 3
"""Settings named in a component's message; the others are counted."""


@dataclass(frozen=True)
class SettingOutcome:
    """What happened to one setting (a file, or one GPU's limit or clocks)."""

    key: str
    """The setting's baseline key (for a file, its path on the node)."""
    result: ControlResult
    target: str | None = None
    observed: str | None = None
    """The value before the attempt."""
    read_back: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class ComponentOutcome:
    """One component's result (the CPU cap, the CPU governor) and the settings behind it."""

    result: ControlResult | None
    """None: nothing asked and nothing to restore, so nothing to report."""
    message: str = ""
    settings: tuple[SettingOutcome, ...] = ()

    @classmethod
    def of(cls, settings: Sequence[SettingOutcome], message: str = "") -> ComponentOutcome:
        result = combine_results(s.result for s in settings)
        if not message:
            named = [
                f"{s.key}: {s.result.value}{f' ({s.detail})' if s.detail else ''}"
                for s in settings
                if s.result is result
            ]
            # A node has a cpufreq policy per core on some drivers: name a few, count the rest,
            # so controlStatus stays readable (the log has every one).
            message = "; ".join(named[:MESSAGE_SETTINGS])
            if len(named) > MESSAGE_SETTINGS:
                message += f"; and {len(named) - MESSAGE_SETTINGS} more"
        return cls(result, message, tuple(settings))
