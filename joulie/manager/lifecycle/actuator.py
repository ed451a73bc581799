"""What every way of powering a node off and on again looks like to the lifecycle controller.

A shutdown is asked for only after every safety check passed (a live pod list found no workload
pod on the node, the limits admitted it, this process leads). It must be idempotent: a manager
restarted mid-shutdown calls it again with the same ``idempotency_key``.

Powering on: each pass asks the actuator what it could power on (:meth:`Actuator.bootable`,
read from objects, never from memory, so a restarted manager sees the boots in flight), the
shared decision (``core.lifecycle_boot.plan_boots``) chooses, and :meth:`Actuator.power_on` is
called for each choice. What a boot has in flight lives on an object (the Node's phase
annotations, a record, the MachineDeployment's replicas), so a restart never boots twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from joulie.api.lifecycle import Action, StateTuple
from joulie.kube.projections import SlimNode

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


@dataclass(frozen=True)
class BootOffer:
    """Nodes of one shape an actuator can power on: a node group, or powered-off nodes."""

    group: str
    """A stable name: ``MachineDeployment ns/name``, or the first off node's name."""
    allocatable: Mapping[str, str]
    """What one node of it offers, as a Node's status.allocatable (cpu, memory, GPU
    resources)."""
    can_boot: int
    """How many more of its nodes may be powered on now (off nodes not cooling down; a
    group's maximum size less its size)."""
    booting: int = 0
    """Its nodes powering on now, not yet Ready."""
    nodes: tuple[str, ...] = ()
    """The off nodes by name, in the order they are powered on; empty for a scaled group (its
    controller makes the nodes)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels of one of its nodes, where known (a power profile that keeps performance pods
    off it)."""
    cooling_until: float | None = None
    """A boot did not register within its boot grace: nothing of the group boots before this."""
    problem: str = ""
    """Why nothing of it can be powered on (reported; ``can_boot`` is 0 then)."""


@dataclass(frozen=True)
class PowerOnRequest:
    group: str
    node: str
    """The Node to power on; "" for a scaled group (its controller makes ``count`` nodes)."""
    count: int
    reason: str
    """Why, in words (how many pods wait, of what)."""
    idempotency_key: str
    """Equal across retries and restarts of one boot: the Node's uid and the time it went
    off, or the group and its size before the boot."""
    uid: str = ""
    provider_id: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


class Actuator(Protocol):
    name: str

    async def shutdown(self, request: ShutdownRequest) -> ActuatorResult:
        """Power the node off; never raises for a failure of the far end (it is a FAILED
        result naming what went wrong)."""
        ...

    async def bootable(self, nodes: Sequence[SlimNode], now: float) -> list[BootOffer]:
        """What could be powered on now, with the boots in flight; ``nodes`` are the Nodes the
        lifecycle manages (from the cache). Never raises for a failure of the far end: a group
        that cannot be read is an offer with a ``problem``."""
        ...

    async def power_on(self, request: PowerOnRequest) -> ActuatorResult:
        """Power on; DONE or ACCEPTED once asked (the node is then booting), FAILED naming what
        went wrong. Never raises for a failure of the far end."""
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
    namespace: str = "joulie-system"
    """The manager's own namespace (where an actuator keeps records it needs)."""
    eligible: Callable[[SlimNode], bool] = lambda _: True
    """Whether the lifecycle manages a node (NODE_SELECTOR): an actuator that remembers nodes
    no longer registered offers only those."""


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
