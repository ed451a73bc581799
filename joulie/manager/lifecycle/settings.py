"""Environment variables of the node lifecycle (part of the controller manager's settings)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import annotated_types as at
from pydantic import AfterValidator, BeforeValidator, Field

from joulie.api.lifecycle import MatrixError, load_matrix
from joulie.core.lifecycle import LifecycleConfig
from joulie.core.lifecycle_limits import Limits
from joulie.manager.lifecycle import actuators
from joulie.settings import (
    Accepts,
    Duration,
    EnvSettings,
    Problem,
    check_duration_range,
    parse_duration,
)

DurationOrZero = Annotated[
    float, BeforeValidator(parse_duration), at.Ge(0), AfterValidator(check_duration_range)
]
"""A time span in seconds where 0 means "none"."""


class LifecycleMode(StrEnum):
    OFF = "off"
    """No lifecycle controller: nothing is read or written."""
    DRY_RUN = "dry-run"
    """Every node's tuple, action and reason are logged, counted and reported as Events, and
    nothing is changed: no taint, no cordon, no annotation, no actuator call."""
    ENFORCE = "enforce"


def _known_actuator(value: str) -> str:
    if value:
        actuators.registration(value)  # ValueError naming the accepted ones
    return value


def parse_windows(text: str) -> tuple[tuple[float, float], ...]:
    """``54m-60m,1h54m-2h`` to spans in seconds."""
    spans = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        start, sep, end = part.partition("-")
        if not sep:
            raise ValueError(f"{part!r} is not a span start-end")
        first, last = parse_duration(start.strip()), parse_duration(end.strip())
        assert isinstance(first, float)
        assert isinstance(last, float)
        spans.append((first, last))
    return tuple(spans)


def _windows(value: object) -> object:
    if isinstance(value, str):
        parse_windows(value)  # raises with the offending part named
    return value


class LifecycleSettings(EnvSettings):
    """The LIFECYCLE_* variables; ManagerSettings inherits them."""

    lifecycle_mode: LifecycleMode = LifecycleMode.DRY_RUN
    """off, dry-run (decide, log and report, change nothing) or enforce."""
    lifecycle_interval: Duration = 30.0
    """Time between two lifecycle passes over every managed node."""
    lifecycle_matrix_file: str = ""
    """A policy matrix file replacing the built-in one (checked at start-up to decide every
    tuple); `joulie lifecycle matrix` prints the one in effect."""
    lifecycle_actuator: Annotated[
        str,
        AfterValidator(_known_actuator),
        Accepts(f"{actuators.described()}; required with enforce"),
    ] = ""
    """How a node is powered off with LIFECYCLE_MODE=enforce."""
    lifecycle_webhook_url: str = ""
    """LIFECYCLE_ACTUATOR=webhook: the URL each shutdown is POSTed to."""
    lifecycle_webhook_secret_file: str = ""
    """LIFECYCLE_ACTUATOR=webhook: a file holding the HMAC key that signs each request."""
    lifecycle_webhook_timeout: Duration = 10.0
    """LIFECYCLE_ACTUATOR=webhook: time limit of one request."""
    lifecycle_shutdown_timeout: Duration = 600.0
    """A shutdown the actuator accepted is asked for again if the node is still there, and
    Ready, after this long."""

    lifecycle_boot_grace: Duration = 1200.0
    """A node has this long after launch to become Ready."""
    lifecycle_idle_grace: Duration = 600.0
    """A node idle this long may be drained."""
    lifecycle_not_ready_grace: Duration = 100.0
    """A node NotReady this long is down."""
    lifecycle_heartbeat_stale: Duration = 120.0
    """A node whose Lease was not renewed for this long is down."""
    lifecycle_billing_period: DurationOrZero = 0.0
    """0: shutting down is always allowed. Otherwise the billing period, counted from launch."""
    lifecycle_shutdown_windows: Annotated[
        str, BeforeValidator(_windows), Accepts("spans such as 54m-60m, comma-separated")
    ] = ""
    """With a billing period: the spans of each period in which a node may be shut down."""
    lifecycle_drain_settle: Duration = 5.0
    """After tainting a node, wait this long before the live re-check."""

    lifecycle_max_concurrent_drains: Annotated[int | None, Field(ge=0)] = None
    """Nodes draining at once; unset: 1 % of the managed nodes, rounded up, at least 1 (50 of
    5,000), within LIFECYCLE_BUDGET_PCT."""
    lifecycle_max_concurrent_boots: Annotated[int | None, Field(ge=0)] = None
    """Nodes powering on at once for pending pods; unset: 10 % of the nodes the lifecycle knows,
    rounded up, at least 5 (0: never power a node on)."""
    lifecycle_max_concurrent_shutdowns: Annotated[int, Field(ge=0)] = 5
    """Shutdowns in flight at once (requested and not yet done)."""
    lifecycle_budget_pct: Annotated[float, Field(ge=0, le=100)] = 10.0
    """Managed nodes draining or shutting down at once, in percent (rounded up)."""
    lifecycle_min_nodes: Annotated[int, Field(ge=0)] = 0
    """Drains and shutdowns never leave fewer managed nodes serving than this."""
    lifecycle_unready_halt_pct: Annotated[float, Field(ge=0, le=100)] = 45.0
    """Halt every drain and shutdown while more than this share of managed nodes is NotReady."""
    lifecycle_unready_ok_count: Annotated[int, Field(ge=0)] = 3
    """... unless no more than this many are NotReady while most managed nodes are Ready."""
    lifecycle_backoff: Duration = 300.0
    """Wait after a failed or refused shutdown of a node, or a power-on that failed or did not
    register within LIFECYCLE_BOOT_GRACE; doubles with each failure in a row."""
    lifecycle_max_backoff: Duration = 3600.0
    """The longest wait LIFECYCLE_BACKOFF doubles up to."""
    lifecycle_stale_after: Duration = 300.0
    """No action while any cache the decisions read has had no contact with the API server for
    this long."""

    def lifecycle_config(self) -> LifecycleConfig:
        return LifecycleConfig(
            boot_grace_s=self.lifecycle_boot_grace,
            idle_grace_s=self.lifecycle_idle_grace,
            not_ready_grace_s=self.lifecycle_not_ready_grace,
            heartbeat_stale_s=self.lifecycle_heartbeat_stale,
            billing_period_s=self.lifecycle_billing_period,
            shutdown_windows=parse_windows(self.lifecycle_shutdown_windows),
            drain_settle_s=self.lifecycle_drain_settle,
        )

    def lifecycle_limits(self) -> Limits:
        return Limits(
            max_concurrent_drains=self.lifecycle_max_concurrent_drains,
            max_concurrent_boots=self.lifecycle_max_concurrent_boots,
            max_concurrent_shutdowns=self.lifecycle_max_concurrent_shutdowns,
            budget_pct=self.lifecycle_budget_pct,
            min_nodes=self.lifecycle_min_nodes,
            unready_halt_pct=self.lifecycle_unready_halt_pct,
            unready_ok_count=self.lifecycle_unready_ok_count,
        )

    def lifecycle_problems(self) -> list[Problem]:
        """Start-up errors of the lifecycle variables (the matrix is loaded and checked here)."""
        problems: list[Problem] = []
        if self.lifecycle_mode is LifecycleMode.OFF:
            return problems
        try:
            load_matrix(self.lifecycle_matrix_file or None)
        except MatrixError as exc:
            problems.append(
                self.problem("lifecycle_matrix_file", str(exc), "a total lifecycle matrix file")
            )
        try:
            self.lifecycle_config()
        except ValueError as exc:
            problems.append(
                self.problem(
                    "lifecycle_shutdown_windows",
                    str(exc),
                    "spans within LIFECYCLE_BILLING_PERIOD, at least one when it is set",
                )
            )
        if self.lifecycle_mode is LifecycleMode.ENFORCE:
            if not self.lifecycle_actuator:
                problems.append(
                    self.problem(
                        "lifecycle_actuator",
                        "is required with LIFECYCLE_MODE=enforce",
                        ", ".join(actuators.ACTUATOR_KINDS),
                    )
                )
            else:
                problems += actuators.registration(self.lifecycle_actuator).problems(self)
        return problems
