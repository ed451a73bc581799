"""The AgentReporting condition of a node's NodeTwin: whether its agent publishes NodeHardware."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final, NamedTuple

from joulie.api.enums import (
    ConditionStatus,
)

NODE_HARDWARE_CURRENT: Final = "NodeHardwareCurrent"
NO_NODE_HARDWARE: Final = "NoNodeHardware"
NODE_HARDWARE_STALE: Final = "NodeHardwareStale"
AGENT_STALE_AFTER: Final = timedelta(minutes=15)
"""A NodeHardware last written longer ago than this no longer counts as a reporting agent."""


class AgentReporting(NamedTuple):
    status: ConditionStatus
    reason: str
    message: str


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def agent_reporting(
    hardware_present: bool,
    status_usable: bool,
    last_agent_write: datetime | None,
    now: datetime,
) -> AgentReporting:
    """The AgentReporting condition of a node's NodeTwin.

    ``hardware_present``: the node's NodeHardware exists; ``status_usable``: it has a status that
    validates; ``last_agent_write``: the newest ``time`` of its ``metadata.managedFields`` entries
    for the ``status`` subresource (None when there is none).

    True (NodeHardwareCurrent) while a usable NodeHardware status was written at most 15 minutes
    ago; False with NoNodeHardware when there is no NodeHardware or no usable status in it (the
    message says which), and with NodeHardwareStale when the last status write is older. False
    means the caps in the spec are not being enforced.
    """
    if not hardware_present:
        return AgentReporting(
            ConditionStatus.FALSE,
            NO_NODE_HARDWARE,
            "No agent has published NodeHardware for this node; its caps are not enforced.",
        )
    if not status_usable:
        return AgentReporting(
            ConditionStatus.FALSE,
            NO_NODE_HARDWARE,
            "The node's NodeHardware has no usable status (missing or invalid); "
            "its caps are not enforced.",
        )
    if last_agent_write is not None:
        age = _utc(now) - _utc(last_agent_write)
        if age > AGENT_STALE_AFTER:
            # The message names the time of the last write, not its age: an age would change
            # the condition, and so cost a write, every reconcile for as long as the agent is away.
            last = _utc(last_agent_write).strftime("%Y-%m-%dT%H:%M:%SZ")
            return AgentReporting(
                ConditionStatus.FALSE,
                NODE_HARDWARE_STALE,
                f"The agent last wrote NodeHardware status at {last}, over 15 minutes ago; "
                "its caps may not be enforced.",
            )
    return AgentReporting(
        ConditionStatus.TRUE, NODE_HARDWARE_CURRENT, "The node's agent publishes NodeHardware."
    )
