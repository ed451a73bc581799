"""What every way of powering a node off looks like to the lifecycle controller.

An actuator is called only after every safety check passed (a live pod list found no workload
pod on the node, the limits admitted it, this process leads). It must be idempotent: a manager
restarted mid-shutdown calls it again with the same ``idempotency_key``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from joulie.api.lifecycle import Action, StateTuple

if TYPE_CHECKING:
    from joulie.kube.client import KubeClient
    from joulie.kube.writes import Writer
    from joulie.manager.lifecycle.settings import LifecycleSettings
    from joulie.settings import Problem


@dataclass(frozen=True)
class ShutdownRequest:
    node: str
    uid: str
    provider_id: str
    """The Node's spec.providerID ("" when it has none)."""
    action: Action
    """START_SHUTDOWN, or START_DRAIN for an idle node whose drain completed."""
    tuple: StateTuple
    reason: str
    idempotency_key: str
    """The Node's uid and the time its drain or shutdown began: equal across retries and
    restarts of one attempt, different for the next attempt."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """The Node's annotations (KWOK's marker, Cluster API's machine reference)."""
    labels: Mapping[str, str] = field(default_factory=dict)


class Outcome(StrEnum):
    DONE = "done"
    """The node is off (or its Node object gone)."""
    ACCEPTED = "accepted"
    """The far end took the request and will power the node off; the controller waits for the
    Node to disappear or go NotReady, and asks again after the shutdown timeout."""
    FAILED = "failed"
    """Nothing was done: the controller rolls back its taint and cordon and backs off."""


@dataclass(frozen=True)
class ActuatorResult:
    outcome: Outcome
    message: str
    retry_after_s: float | None = None
    """A wait the far end asked for (HTTP Retry-After), which the backoff honours."""


class Actuator(Protocol):
    name: str

    async def shutdown(self, request: ShutdownRequest) -> ActuatorResult:
        """Power the node off; never raises for a failure of the far end (it is a FAILED
        result naming what went wrong)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class BuildArgs:
    """What an actuator may be built from."""

    client: KubeClient
    writer: Writer
    """The lifecycle's fenced writer: an actuator's writes stop when this process stops leading."""
    settings: LifecycleSettings | None
    """The LIFECYCLE_* settings (None: every default)."""


def _no_problems(_: LifecycleSettings) -> list[Problem]:
    return []


@dataclass(frozen=True)
class Registration:
    """One way of powering a node off, as LIFECYCLE_ACTUATOR names it: each actuator module
    declares one, and ``joulie.manager.lifecycle.actuators.ACTUATORS`` lists them."""

    name: str
    """The value of LIFECYCLE_ACTUATOR."""
    does: str
    """What it does, in a few words (the settings reference and messages show it)."""
    build: Callable[[BuildArgs], Actuator]
    """The actuator; ValueError naming what is wrong for an unusable configuration."""
    problems: Callable[[LifecycleSettings], list[Problem]] = _no_problems
    """Start-up problems of the settings it reads, with LIFECYCLE_MODE=enforce."""
