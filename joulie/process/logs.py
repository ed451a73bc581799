"""Logging: structlog for Joulie's own events, with library logs routed to the same output.

JSON lines by default (what a log pipeline wants), a readable console form when standard output is
a terminal, so `joulie ...` run by hand is pleasant and the same command in a pod is parseable.
"""

from __future__ import annotations

import logging
import sys
from typing import IO

import structlog
from structlog.tracebacks import ExceptionDictTransformer

from joulie.process.settings import LogFormat, LogLevel

MAX_TRACEBACK_FRAMES = 20
"""Frames a logged traceback keeps (structlog keeps the first and last ones past this): a deep
recursion must not make a log line of megabytes."""

# Never a frame's local variables: structlog shows them by default, and a failure at start-up
# logged the webhook's signing key three times in one line. A traceback names code, not data.
_JSON_TRACEBACKS = structlog.processors.ExceptionRenderer(
    ExceptionDictTransformer(show_locals=False, max_frames=MAX_TRACEBACK_FRAMES, use_rich=False)
)

MAX_VALUE_CHARS = 2000
"""Characters of one logged value kept (the rest is counted, not written): a value taken from a
request, such as a repeated 10 MB node name in a refusal, must not make a log line of that size.
With at most MAX_TRACEBACK_FRAMES frames, a line stays within tens of kilobytes."""


def _bounded(value: object, depth: int = 0) -> object:
    if isinstance(value, str):
        if len(value) <= MAX_VALUE_CHARS:
            return value
        return f"{value[:MAX_VALUE_CHARS]}... ({len(value)} characters)"
    if depth >= 4:
        return value
    if isinstance(value, dict):
        return {k: _bounded(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(v, depth + 1) for v in value]
    return value


def _bound_values(
    _: object, __: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """Every string of the event (a rendered traceback's messages included) cut to
    MAX_VALUE_CHARS."""
    return {key: _bounded(value) for key, value in event_dict.items()}


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
        structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        if console
        else structlog.processors.JSONRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([] if console else [_JSON_TRACEBACKS]),
            _bound_values,
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
