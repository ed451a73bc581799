"""The node-agent role: ``AGENT_MODE`` picks the shell (settings.check has already refused
backends that do not fit the mode)."""

from __future__ import annotations

from joulie.agent.daemon_role import DaemonRole
from joulie.agent.pool_role import PoolRole
from joulie.agent.settings import AgentMode, AgentSettings


def build(settings: AgentSettings) -> DaemonRole | PoolRole:
    if settings.agent_mode is AgentMode.POOL:
        return PoolRole(settings)
    return DaemonRole(settings)
