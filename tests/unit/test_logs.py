"""What a logged failure shows: the code it went through, never the data it held."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from joulie.process.logs import MAX_TRACEBACK_FRAMES, MAX_VALUE_CHARS, configure_logging
from joulie.process.settings import LogFormat, LogLevel

SECRET = "hmac-key-7f3a9c1e5b"


def _fail_holding_a_secret() -> None:
    key = SECRET.encode()  # a local, as the webhook actuator's builder held the signing key
    raise RuntimeError(f"webhook not reachable ({len(key)} byte key)")


def _recurse(depth: int) -> None:
    if depth == 0:
        raise RecursionError("too deep")
    _recurse(depth - 1)


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield io.StringIO()
    structlog.reset_defaults()
    root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("log_format", [LogFormat.JSON, LogFormat.CONSOLE])
def test_a_logged_traceback_carries_no_local_variables(
    log_format: LogFormat, logged: io.StringIO
) -> None:
    configure_logging(log_format, LogLevel.INFO, logged)
    try:
        _fail_holding_a_secret()
    except RuntimeError as exc:
        structlog.get_logger("t").error("role failed", exc_info=exc)
    out = logged.getvalue()
    assert "_fail_holding_a_secret" in out  # the traceback is there
    assert SECRET not in out


def test_a_deep_traceback_is_cut_to_a_bounded_line(logged: io.StringIO) -> None:
    configure_logging(LogFormat.JSON, LogLevel.INFO, logged)
    try:
        _recurse(900)
    except RecursionError as exc:
        structlog.get_logger("t").error("failed", exc_info=exc)
    (line,) = logged.getvalue().splitlines()
    frames = json.loads(line)["exception"][0]["frames"]
    assert len(frames) <= MAX_TRACEBACK_FRAMES + 1  # and one line saying how many were cut
    assert len(line) < 20_000


def test_a_huge_value_or_message_is_cut_to_a_bounded_line(logged: io.StringIO) -> None:
    # A refusal quoting a 10 MB node name, or an error carrying one, was logged whole.
    configure_logging(LogFormat.JSON, LogLevel.INFO, logged)
    name = "n" * 10_000_000
    structlog.get_logger("t").warning("refused a malformed request", reason=name)
    try:
        raise ValueError(f"node {name!r} is listed twice")
    except ValueError as exc:
        structlog.get_logger("t").error("failed", exc_info=exc)
    first, second = logged.getvalue().splitlines()
    assert json.loads(first)["reason"].endswith("... (10000000 characters)")
    assert json.loads(second)["exception"][0]["exc_value"].endswith("(10000023 characters)")
    assert max(len(first), len(second)) < MAX_VALUE_CHARS + 20_000
