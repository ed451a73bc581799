"""Logging: structlog for Joulie's own events, with library logs routed to the same output.

JSON lines by default (what a log pipeline wants), a readable console form when standard output is
a terminal, so `joulie ...` run by hand is pleasant and the same command in a pod is parseable.
"""

from __future__ import annotations

import logging
import sys
from typing import IO

import structlog

from joulie.process_settings import LogFormat, LogLevel

_LEVELS = {
    LogLevel.DEBUG: logging.DEBUG,
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
}


def configure_logging(
    log_format: LogFormat, level: LogLevel, stream: IO[str] | None = None
) -> None:
    stream = stream or sys.stdout
    console = log_format is LogFormat.CONSOLE or (log_format is LogFormat.AUTO and stream.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if console else structlog.processors.JSONRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([] if console else [structlog.processors.dict_tracebacks]),
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
    # Libraries are chatty at INFO (every HTTP access); keep them at WARNING unless debugging.
    for name in ("aiohttp.access", "kubernetes_asyncio"):
        logging.getLogger(name).setLevel(max(_LEVELS[level], logging.WARNING))

    structlog.configure(
        processors=[
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
