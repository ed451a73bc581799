"""Settings every Joulie process reads, whatever roles it runs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from joulie.settings import ROLE_DEFAULT, Duration, EnvSettings, ListenAddress


class LogFormat(StrEnum):
    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class ProcessSettings(EnvSettings):
    role = "process"

    log_format: LogFormat = LogFormat.AUTO
    """Log output: json (one JSON object per line), console (for people), or auto (console when
    standard output is a terminal, json otherwise)."""
    log_level: LogLevel = LogLevel.INFO
    """Lowest level that is logged."""
    metrics_addr: Annotated[ListenAddress, ROLE_DEFAULT] = ":8080"
    """Where the process serves /healthz, /readyz and /metrics. Unset, each role has its own port
    (README.md, section Ports), so roles started side by side on one machine do not collide; a
    process running several roles serves on its first role's."""
    shutdown_timeout: Annotated[Duration, Field(le=300)] = 20.0
    """How long the roles get to finish after SIGTERM or SIGINT (the agent restores hardware in
    this time); keep it below the pod's terminationGracePeriodSeconds."""
