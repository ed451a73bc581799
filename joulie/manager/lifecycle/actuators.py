"""The shutdown actuators, by the name LIFECYCLE_ACTUATOR gives them.

Adding one: a module with its actuator and its :class:`Registration` (name, what it does, how it
is built, what of the settings it checks), and one entry in :data:`ACTUATORS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from joulie.manager.lifecycle import actuator_capi, actuator_kwok, actuator_webhook
from joulie.manager.lifecycle.actuator import Actuator, BuildArgs, Registration

if TYPE_CHECKING:
    from collections.abc import Callable

    from joulie.kube.client import KubeClient
    from joulie.kube.projections import SlimNode
    from joulie.kube.writes import Writer
    from joulie.manager.lifecycle.settings import LifecycleSettings

ACTUATORS: Final[tuple[Registration, ...]] = (
    actuator_kwok.REGISTRATION,
    actuator_webhook.REGISTRATION,
    actuator_capi.REGISTRATION,
)

ACTUATOR_KINDS: Final = tuple(r.name for r in ACTUATORS)


def registration(kind: str) -> Registration:
    """The actuator named ``kind``; ValueError naming the accepted ones otherwise."""
    for entry in ACTUATORS:
        if entry.name == kind:
            return entry
    raise ValueError(
        f"unknown shutdown actuator {kind!r}: accepted are {', '.join(ACTUATOR_KINDS)}"
    )


def described() -> str:
    """Every actuator and what it does, for the settings reference."""
    return "; ".join(f"{r.name} ({r.does})" for r in ACTUATORS)


def build_actuator(
    kind: str,
    *,
    client: KubeClient,
    writer: Writer,
    settings: LifecycleSettings | None = None,
    namespace: str = "joulie-system",
    eligible: Callable[[SlimNode], bool] = lambda _: True,
) -> Actuator:
    """The actuator of ``kind``; ValueError naming what is accepted for an unknown kind or an
    unusable configuration."""
    return registration(kind).build(BuildArgs(client, writer, settings, namespace, eligible))
