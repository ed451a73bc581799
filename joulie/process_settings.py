"""Settings every Joulie process reads, whatever roles it runs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from joulie.settings import Duration, EnvSettings, ListenAddress


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
    metrics_addr: ListenAddress = ":8080"
    """Where the process serves /healthz, /readyz and /metrics."""
    shutdown_timeout: Annotated[Duration, Field(le=300)] = 20.0
    """How long the roles get to finish after SIGTERM or SIGINT (the agent restores hardware in
    this time); keep it below the pod's terminationGracePeriodSeconds."""
