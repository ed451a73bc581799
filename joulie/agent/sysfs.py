"""Reading and writing kernel interface files (sysfs, procfs) under a configurable root.

On a node the root is ``/`` (the DaemonSet mounts the host's ``/sys`` and ``/proc`` there); in
tests it is a checked-in fake tree, so discovery and every control path run against files that
behave like the kernel's, without hardware.

Every failure becomes a :class:`SysfsError` whose ``kind`` says what the agent should make of it:
a file that is not there (the feature is absent), one it may not read or write (locked by the
BIOS, or a missing capability), a value the kernel refused (out of range, not supported), or
contents that do not parse. Nothing here retries or guesses; callers decide.
"""

from __future__ import annotations

import errno
import os
from enum import StrEnum
from pathlib import Path

__all__ = ["ErrorKind", "Sysfs", "SysfsError"]


MAX_ATTRIBUTE_BYTES = 4096
"""A sysfs attribute is at most one page (PAGE_SIZE, 4 KiB on x86-64 and most arm64 kernels)."""


class ErrorKind(StrEnum):
    MISSING = "missing"
    """The file does not exist: the interface is not there on this node."""
    PERMISSION = "permission"
    """EACCES/EPERM: read-only mount, BIOS lock, or a capability the agent lacks."""
    REJECTED = "rejected"
    """EINVAL/EOPNOTSUPP/EBUSY on write: the kernel refused the value."""
    INVALID = "invalid"
    """The contents are not what the interface documents (not a number, empty)."""
    IO = "io"
    """Any other OS error."""


class SysfsError(Exception):
    def __init__(self, kind: ErrorKind, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.kind = kind
        self.path = path
        self.detail = detail


_REJECTED = {errno.EINVAL, errno.EOPNOTSUPP, errno.EBUSY, errno.ERANGE, errno.ENODATA}


def _classify(error: OSError) -> ErrorKind:
    if isinstance(error, FileNotFoundError | NotADirectoryError):
        return ErrorKind.MISSING
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ErrorKind.PERMISSION
    if error.errno in _REJECTED:
        return ErrorKind.REJECTED
    return ErrorKind.IO


class Sysfs:
    """Files under ``root``; every path argument is absolute as on the node (``/sys/...``)."""

    def __init__(self, root: str | Path = "/") -> None:
        self.root = Path(root)

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def exists(self, path: str) -> bool:
        return self.path(path).exists()

    def listdir(self, path: str) -> list[str]:
        """Entry names, sorted; empty when the directory is missing or unreadable."""
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []

    def read(self, path: str, limit: int = MAX_ATTRIBUTE_BYTES) -> str:
        """The file's contents without surrounding white space. At most ``limit`` bytes are read
        (a page by default: the kernel's attribute files are never longer); a longer file (a
        planted one, or a link to /dev/zero in a tree that is not the host's) is refused rather
        than read whole."""
        try:
            with open(self.path(path), "rb") as file:
                data = file.read(limit + 1)
        except OSError as exc:
            raise SysfsError(_classify(exc), path, exc.strerror or repr(exc)) from None
        if len(data) > limit:
            raise SysfsError(ErrorKind.INVALID, path, f"longer than {limit} bytes")
        return data.decode("utf-8", errors="replace").strip()

    def read_int(self, path: str) -> int:
        text = self.read(path)
        try:
            return int(text)
        except ValueError:
            raise SysfsError(ErrorKind.INVALID, path, f"not an integer: {text[:40]!r}") from None

    def try_read(self, path: str, limit: int = MAX_ATTRIBUTE_BYTES) -> str | None:
        """The contents, or None when the file is missing, cannot be read or is too long."""
        try:
            return self.read(path, limit)
        except SysfsError:
            return None

    def try_read_int(self, path: str) -> int | None:
        try:
            return self.read_int(path)
        except SysfsError:
            return None

    def write(self, path: str, value: str) -> None:
        """Write ``value`` as one ``write(2)``, as the kernel's attribute files expect; the file
        must exist already (a control file is never created) and resolve to a file under the
        root: sysfs links its directories to each other, but a link that leads out of the tree
        (a planted one, or a root that is not the host's) is refused, never followed."""
        target = self.path(path)
        real = os.path.realpath(target)
        root = os.path.realpath(self.root)
        if os.path.commonpath([real, root]) != root:
            raise SysfsError(ErrorKind.PERMISSION, path, f"resolves to {real}, outside {root}")
        try:
            self._write(target, value)
        except OSError as exc:
            raise SysfsError(_classify(exc), path, exc.strerror or repr(exc)) from None

    def _write(self, target: Path, value: str) -> None:
        """The system call itself: the one seam where a test tree injects what a kernel does
        that a plain file cannot (EINVAL for a value out of range, EBUSY, EACCES as root)."""
        # O_TRUNC as a shell redirection does: sysfs ignores it, a fake tree needs it. O_NOFOLLOW:
        # an attribute file is never a link itself, so one put in its place is not followed.
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
