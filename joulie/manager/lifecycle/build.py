"""The node lifecycle's parts, built from the manager's settings and its running pieces."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from joulie.api.lifecycle import load_matrix
from joulie.kube.client import KubeClient
from joulie.kube.events import EventRecorder
from joulie.kube.informer import Informer
from joulie.kube.projections import LeaseView, SlimNode, lease_view
from joulie.kube.writes import Writer
from joulie.manager.cache import ClusterCache
from joulie.manager.lifecycle.actuators import build_actuator
from joulie.manager.lifecycle.controller import NODE_LEASES, LifecycleController
from joulie.manager.lifecycle.node_edits import NodeEdits
from joulie.manager.lifecycle.report import CONDITION_MANAGER, Reporter
from joulie.manager.lifecycle.settings import LifecycleMode, LifecycleSettings
from joulie.manager.node_writer import MAP_LISTS


def node_leases(client: KubeClient) -> Informer[LeaseView]:
    """The kubelets' heartbeats: one Lease per node in kube-node-lease, named after it."""
    return Informer(client, NODE_LEASES, lease_view)


def build_lifecycle(
    settings: LifecycleSettings,
    client: KubeClient,
    cache: ClusterCache,
    leases: Informer[LeaseView],
    eligible: Callable[[SlimNode], bool],
    events: EventRecorder,
    may_write: Callable[[], bool],
    wall_clock: Callable[[], datetime],
    namespace: str = "joulie-system",
) -> tuple[LifecycleController, Writer]:
    """The controller and the writer whose requests a term's end waits for (settings were
    checked at start-up, so the matrix loads and the timings are valid)."""
    writer = Writer(client, CONDITION_MANAGER, map_lists=MAP_LISTS, may_write=may_write)
    enforce = settings.lifecycle_mode is LifecycleMode.ENFORCE
    actuator = None
    if enforce:
        actuator = build_actuator(
            settings.lifecycle_actuator,
            client=client,
            writer=writer,
            settings=settings,
            namespace=namespace,
            eligible=eligible,
        )
    controller = LifecycleController(
        cache=cache,
        leases=leases,
        eligible=eligible,
        matrix=load_matrix(settings.lifecycle_matrix_file or None),
        config=settings.lifecycle_config(),
        limits=settings.lifecycle_limits(),
        interval=settings.lifecycle_interval,
        stale_after=settings.lifecycle_stale_after,
        shutdown_timeout=settings.lifecycle_shutdown_timeout,
        backoff=(settings.lifecycle_backoff, settings.lifecycle_max_backoff),
        edits=NodeEdits(client, writer) if enforce else None,
        actuator=actuator,
        reporter=Reporter(events, writer, dry_run=not enforce),
        events=events,
        wall_clock=wall_clock,
    )
    return controller, writer
