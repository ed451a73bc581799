"""How the CLI words failures that are not its own: a file that cannot be read or written, an
interrupt. One line each, never a traceback."""

from __future__ import annotations

import os

__all__ = ["EXIT_INTERRUPTED", "os_error_line"]

EXIT_INTERRUPTED = 128 + 2
"""What a shell reports for a command stopped by SIGINT (Ctrl-C)."""


def os_error_line(exc: OSError, prog: str = "joulie") -> str:
    """``PROG: PATH: reason`` for a failed file operation (``PROG: reason`` when no path is
    known), as cp, mkdir and other Unix tools say it."""
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    if exc.filename is None:
        return f"{prog}: {reason}"
    path = os.fsdecode(exc.filename)
    if exc.filename2 is not None:
        path = f"{path} -> {os.fsdecode(exc.filename2)}"
    return f"{prog}: {path}: {reason}"
