"""Environment variables of the scheduler-extender role."""

from __future__ import annotations

from joulie.settings import EnvSettings, ListenAddress


class ExtenderSettings(EnvSettings):
    role = "extender"

    extender_addr: ListenAddress = ":9876"
    """Where the extender serves kube-scheduler's filter, prioritize and preempt calls."""
