"""The node-agent role: ``AGENT_MODE`` picks the shell (settings.check has already refused
backends that do not fit the mode).

Each shell is imported only in its own mode: the DaemonSet's brings gRPC and protobuf (the
kubelet's PodResources API, about 20 MiB of RSS) that a pool replica never uses, and the pool's
brings nothing the DaemonSet needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joulie.agent.settings import AgentMode, AgentSettings

if TYPE_CHECKING:
    from joulie.agent.daemon_role import DaemonRole
    from joulie.agent.pool_role import PoolRole


def build(settings: AgentSettings) -> DaemonRole | PoolRole:
    if settings.agent_mode is AgentMode.POOL:
        from joulie.agent.pool_role import PoolRole

        return PoolRole(settings)
    from joulie.agent.daemon_role import DaemonRole

    return DaemonRole(settings)
