"""The roles one Joulie process can run, and the settings each one reads."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from joulie.process.settings import ProcessSettings
from joulie.settings import EnvSettings, Loaded, Source

if TYPE_CHECKING:  # the runtime (aiohttp, prometheus) loads only when roles run
    from joulie.process.runtime import Role


@dataclass(frozen=True)
class RoleSpec:
    name: str
    summary: str
    settings_class: str
    """``module:class`` of the role's settings, imported when read (:attr:`settings`): a process
    runs one or two roles, and the manager's settings alone import its lifecycle actuators and,
    through them, numpy and httpx (about 16 MiB of RSS an agent on every node did not use)."""
    metrics_port: int
    """METRICS_ADDR's default port when this role is the first of its process: each role has its
    own, so two roles started side by side on one machine do not collide."""
    implementation: str | None = None
    """``module:factory`` building the role from its settings; None until the role is built."""

    @property
    def settings(self) -> type[EnvSettings]:
        cls: type[EnvSettings] = _resolve(self.settings_class)
        return cls

    def build(self, settings: EnvSettings) -> Role:
        if self.implementation is None:
            raise NotImplementedError(self.name)
        factory: Callable[[Any], Role] = _resolve(self.implementation)
        return factory(settings)


def _resolve(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


ROLES: Mapping[str, RoleSpec] = {
    spec.name: spec
    for spec in (
        RoleSpec(
            "manager",
            "controller manager: policy, performance split, caps, governors, twin",
            "joulie.manager.settings:ManagerSettings",
            metrics_port=8080,
            implementation="joulie.manager.role:build",
        ),
        RoleSpec(
            "agent",
            "node agent: hardware discovery and enforcement of caps and governors",
            "joulie.agent.settings:AgentSettings",
            metrics_port=8081,
            implementation="joulie.agent.role:build",
        ),
        RoleSpec(
            "extender",
            "scheduler extender: filter, prioritize and preempt for kube-scheduler",
            "joulie.extender.settings:ExtenderSettings",
            metrics_port=8082,
            implementation="joulie.extender.role:build",
        ),
        RoleSpec(
            "simulator",
            "telemetry/control service standing in for the hardware of KWOK nodes",
            "joulie.sim.settings:SimulatorSettings",
            metrics_port=8083,
            implementation="joulie.sim.service:build",
        ),
    )
}


class UnknownRoleError(ValueError):
    pass


def parse_roles(text: str) -> list[RoleSpec]:
    """``manager,extender`` to role specs, in the given order, without repeats."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UnknownRoleError(f"no role given; choose from {', '.join(ROLES)}")
    unknown = [n for n in names if n not in ROLES]
    if unknown:
        raise UnknownRoleError(
            f"unknown role {', '.join(map(repr, unknown))}; choose from {', '.join(ROLES)}"
        )
    return [ROLES[n] for n in dict.fromkeys(names)]


def load_settings(specs: list[RoleSpec], environ: Mapping[str, str]) -> list[Loaded[Any]]:
    """The process settings first, then each role's, all read from ``environ``."""
    return [load_process_settings(specs, environ), *(s.settings.from_env(environ) for s in specs)]


def load_process_settings(
    specs: list[RoleSpec], environ: Mapping[str, str]
) -> Loaded[ProcessSettings]:
    """ProcessSettings with METRICS_ADDR defaulting to the first role's port: a process has one
    metrics server, and naming the first role keeps the choice predictable for a comma list."""
    loaded = ProcessSettings.from_env(environ)
    if loaded.sources[ProcessSettings.env_name("metrics_addr")] != Source.DEFAULT or not specs:
        return loaded
    default = f":{specs[0].metrics_port}"
    return replace(loaded, settings=loaded.settings.model_copy(update={"metrics_addr": default}))
