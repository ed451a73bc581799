"""The shutdown actuator chosen by name, as the lifecycle settings name it."""

from __future__ import annotations

from typing import Final

from joulie.kube.client import KubeClient
from joulie.kube.writes import Writer
from joulie.manager.lifecycle.actuator import Actuator
from joulie.manager.lifecycle.actuator_capi import ClusterApiActuator
from joulie.manager.lifecycle.actuator_kwok import KwokActuator
from joulie.manager.lifecycle.actuator_webhook import WebhookActuator

ACTUATOR_KINDS: Final = ("kwok", "webhook", "cluster-api")


def build_actuator(
    kind: str,
    *,
    client: KubeClient,
    writer: Writer,
    webhook_url: str = "",
    webhook_secret: bytes = b"",
    webhook_timeout_s: float = 10.0,
    webhook_max_attempts: int = 5,
    webhook_base_delay_s: float = 1.0,
    webhook_max_delay_s: float = 60.0,
) -> Actuator:
    """The actuator of ``kind``; ValueError naming what is accepted for an unknown kind or an
    unusable webhook configuration (the webhook settings are read only for "webhook")."""
    match kind:
        case "kwok":
            return KwokActuator(writer)
        case "cluster-api":
            return ClusterApiActuator(client, writer)
        case "webhook":
            if not webhook_url:
                raise ValueError("the webhook actuator needs a URL to POST shutdowns to")
            return WebhookActuator(
                webhook_url,
                webhook_secret,
                timeout_s=webhook_timeout_s,
                max_attempts=webhook_max_attempts,
                base_delay_s=webhook_base_delay_s,
                max_delay_s=webhook_max_delay_s,
            )
        case _:
            raise ValueError(
                f"unknown shutdown actuator {kind!r}: accepted are {', '.join(ACTUATOR_KINDS)}"
            )
