"""Environment variables of the scheduler-extender role."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from joulie.api.quantity import QuantityError, parse_quantity
from joulie.settings import (
    Accepts,
    Duration,
    EnvSettings,
    ListenAddress,
    Problem,
    format_duration,
)

KUBE_SCHEDULER_HTTP_TIMEOUT = 5.0
"""kube-scheduler's default extender httpTimeout, in seconds."""


def _byte_count(value: object) -> object:
    """A whole number of bytes, written as an integer or a quantity such as 128Mi."""
    if not isinstance(value, str):
        return value
    try:
        amount = parse_quantity(value)
    except QuantityError:
        raise ValueError(f"not a byte count: {value!r}") from None
    if amount.denominator != 1:
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(amount)


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _namespace(value: str) -> str:
    if not _NAMESPACE.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes namespace name")
    return value


ByteCount = Annotated[
    int,
    BeforeValidator(_byte_count),
    Field(ge=64 * 1024, le=1024**3),
    Accepts("a byte count from 64Ki to 1Gi, as an integer or a quantity such as 128Mi"),
]


class ExtenderSettings(EnvSettings):
    role = "extender"

    extender_addr: ListenAddress = "127.0.0.1:9876"
    """Where the extender serves kube-scheduler's filter, prioritize and preempt calls. Loopback
    unless set: in a cluster the Deployment sets ":9876" so kube-scheduler can reach it (a
    NetworkPolicy should then admit only kube-scheduler)."""
    extender_debug: bool = False
    """Serve ``/debug/score`` (every term of a node's score for a pod). Off unless set: it needs
    no authentication and shows every node's power, cooling, class and the manager's Lease
    state, and answers whether a node name exists."""
    extender_max_body_bytes: ByteCount = 128 * 1024**2
    """Largest request body accepted (larger ones get 413). Without nodeCacheCapable,
    kube-scheduler sends whole Node objects, 5 to 20 KiB each; the default holds 5,000 of them
    with room to spare."""
    extender_request_timeout: Annotated[Duration, Field(le=60)] = 2.0
    """Time one filter or prioritize request may take before the extender steps aside: a body not
    received by then gets 408, and once parsing has used up the time, filter passes every node and
    prioritize scores all alike. Keep it below the httpTimeout of the extender in kube-scheduler's
    configuration (5s unless set)."""
    extender_tls_cert_file: str = ""
    """PEM certificate chain to serve HTTPS with (set together with EXTENDER_TLS_KEY_FILE);
    plain HTTP when both are empty."""
    extender_tls_key_file: str = ""
    """PEM private key of EXTENDER_TLS_CERT_FILE."""
    pod_namespace: Annotated[
        str,
        AfterValidator(_namespace),
        Accepts("a Kubernetes namespace name (lowercase letters, digits and '-', at most 63)"),
    ] = "joulie-system"
    """Namespace the extender runs in (set it from the downward API); the controller manager's
    leader Lease, which tells whether the twins are being kept current, is read there."""

    def check(self) -> list[Problem]:
        problems = []
        pair = ("extender_tls_cert_file", "extender_tls_key_file")
        for this, other in (pair, pair[::-1]):
            if getattr(self, this) and not getattr(self, other):
                problems.append(
                    self.problem(
                        this,
                        f"is set without {self.env_name(other)}",
                        "a PEM file path, set together with "
                        f"{self.env_name(other)} (or both empty for plain HTTP)",
                    )
                )
        return problems

    def advise(self) -> list[str]:
        if self.extender_request_timeout >= KUBE_SCHEDULER_HTTP_TIMEOUT:
            shown = format_duration(self.extender_request_timeout)
            return [
                f"EXTENDER_REQUEST_TIMEOUT={shown} is not below kube-scheduler's default extender "
                "httpTimeout (5s): unless httpTimeout is raised, kube-scheduler gives up first"
            ]
        return []

    @property
    def tls(self) -> bool:
        return bool(self.extender_tls_cert_file and self.extender_tls_key_file)
