"""A fake kernel interface tree: real files under a temporary root, plus the kernel's refusals
that plain files cannot produce (CI runs as root, so file modes give no EACCES).

``FakeSysfs.refuse(path, errno.EACCES)`` makes every write to ``path`` fail with that error, and
``refuse_when(path, predicate, errno)`` only for the values the predicate picks, so tests can
express "a governor that is not listed gives EINVAL" or "a locked RAPL zone gives EACCES".
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from joulie.agent.sysfs import Sysfs


class FakeSysfs(Sysfs):
    def __init__(self, root: str | Path) -> None:
        super().__init__(root)
        self._rules: list[tuple[str, Callable[[str], bool], int]] = []
        self.writes: list[tuple[str, str]] = []
        """Every write attempted, in order (path as on the node, value)."""

    def put(self, path: str, value: str | int) -> None:
        """Create or replace a file of the tree (as the kernel would present it)."""
        target = self.path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{value}\n")

    def refuse(self, path: str, code: int = errno.EACCES) -> None:
        self.refuse_when(path, lambda _: True, code)

    def refuse_when(self, path: str, predicate: Callable[[str], bool], code: int) -> None:
        self._rules.append((path, predicate, code))

    def _write(self, target: Path, value: str) -> None:
        path = "/" + str(target.relative_to(self.root))
        self.writes.append((path, value))
        for rule_path, predicate, code in self._rules:
            if rule_path == path and predicate(value):
                raise OSError(code, os.strerror(code), str(target))
        super()._write(target, value)
