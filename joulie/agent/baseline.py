"""The hardware settings as they were before the agent's first write, kept on the node's disk.

Before the agent changes any setting (a kernel file such as a RAPL limit or a governor, or a GPU
setting named by a key of the GPU backend's choosing), it records the value the setting holds.
Restoring writes those values back. Three rules keep the record honest:

* A setting is recorded once, before the first write, and never again while its entry exists, so
  a value the agent wrote itself can never become the baseline. The record is on disk before the
  write is made; if it cannot be stored, the caller must not write.
* The file carries the boot id. A restart within the same boot reuses it (the settings now hold
  the agent's own values, the file holds the real baseline). After a reboot the firmware and
  drivers have put their defaults back, so a file from another boot is discarded.
* The file is replaced atomically (temporary file, fsync, rename), so a crash leaves the old
  record or the new one, never half of either. A file that cannot be parsed is set aside with a
  clear message and the agent starts with an empty record: it never stops the agent.

Restoring goes through a writer the caller passes (sysfs for the CPU, NVML for GPUs); an entry is
dropped only once its value is back. :meth:`Baseline.restore_with` is the form for callers whose
attempt reports an outcome rather than raising: it returns each outcome and drops the entries a
predicate says are back.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from joulie.agent.sysfs import Sysfs

__all__ = [
    "BOOT_ID_PATH",
    "STATE_FILE",
    "Baseline",
    "BaselineError",
    "BaselineValue",
    "RestoreWriter",
]

log = structlog.get_logger("joulie.agent.baseline")

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
STATE_FILE = "baseline.json"
LOCK_FILE = ".lock"
_FORMAT = 1

BaselineValue = str | int
_Outcome = TypeVar("_Outcome")
RestoreWriter = Callable[[str, BaselineValue], None]
"""Puts one recorded value back; raises when the setting is not back at that value."""


class BaselineError(Exception):
    """The baseline could not be stored: the agent must not make the write it was about to."""


class Baseline:
    """The recorded settings of one node, in the order they were first recorded."""

    def __init__(self, state_dir: str | Path, boot_id: str) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / STATE_FILE
        self.boot_id = boot_id
        self._entries: dict[str, BaselineValue] = {}
        self.note: str | None = None
        """What loading found worth telling (a stale or unreadable file), else None."""
        self.refusal: str | None = None
        """Why nothing may be recorded (so nothing may be written), else None: the agent could
        not tell the node's own values from ones an earlier agent left in force."""
        self._lock_fd: int | None = None

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(cls, state_dir: str | Path, sysfs: Sysfs) -> Baseline:
        """The baseline stored in ``state_dir`` for this boot (empty when there is none)."""
        boot_id = sysfs.try_read(BOOT_ID_PATH) or ""
        baseline = cls(state_dir, boot_id)
        if not boot_id:
            baseline.refusal = (
                f"the boot id ({BOOT_ID_PATH} under the host root) cannot be read, so a value "
                "an earlier agent left in force cannot be told from the node's own: nothing is "
                "written"
            )
            log.error("baseline.boot_id_unknown", path=str(baseline.path))
        baseline._load()
        return baseline

    def hold(self, wait_s: float) -> None:
        """Lock the state directory for this process's lifetime, waiting up to ``wait_s`` for
        an agent still shutting down; when it stays locked, nothing may be recorded: two agents
        on one node would each take the other's values for the node's own."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            # Persisting will fail the same way and refuse each write with the reason.
            log.warning("baseline.lock_unavailable", path=str(self.state_dir), error=str(exc))
            return
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    self.refusal = (
                        f"another agent holds this node's baseline ({self.state_dir}): "
                        "nothing is written"
                    )
                    log.error("baseline.locked", path=str(self.state_dir))
                    return
                time.sleep(0.2)
                continue
            self._lock_fd = fd
            return

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as exc:
            self._set_aside(f"cannot be read ({exc.strerror or exc})")
            return
        try:
            stored_boot, entries = _parse(text)
        except ValueError as exc:
            self._set_aside(f"is not a baseline file ({exc})")
            return
        if self.boot_id and stored_boot != self.boot_id:
            # Another boot: firmware and drivers have reset the settings since it was written.
            self.note = (
                f"discarded the baseline of boot {stored_boot or 'unknown'} "
                f"({len(entries)} settings): the node has rebooted since"
            )
            log.info(
                "baseline.stale",
                path=str(self.path),
                stored_boot=stored_boot,
                boot=self.boot_id,
                settings=len(entries),
            )
            with contextlib.suppress(OSError):
                self.path.unlink()
            return
        self._entries = entries
        log.info("baseline.reused", path=str(self.path), settings=len(entries))

    def _set_aside(self, why: str) -> None:
        aside = self.path.with_name(self.path.name + ".corrupt")
        try:
            os.replace(self.path, aside)
            where = f"; kept as {aside}"
        except OSError:
            where = ""
        self.note = f"{self.path} {why}: starting with an empty baseline{where}"
        # The settings may hold an earlier agent's values, which would now be recorded as the
        # node's own: this agent changes nothing until an operator has looked.
        self.refusal = (
            f"the stored baseline {why} and was set aside{where}; check the node's power "
            "settings, then restart the agent"
        )
        log.error("baseline.unreadable", path=str(self.path), problem=why, kept_as=where or None)

    # -- the record ---------------------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> BaselineValue | None:
        return self._entries.get(key)

    def entries(self) -> dict[str, BaselineValue]:
        """A copy of the record, in recording order."""
        return dict(self._entries)

    def record(self, key: str, value: BaselineValue) -> bool:
        """Record ``value`` as ``key``'s baseline unless one is recorded already, and store it.

        Call with the value read just before the agent's write. Returns whether it was recorded
        now. Raises :class:`BaselineError` when it could not be stored; then do not write.
        """
        if key in self._entries:
            return False
        if self.refusal is not None:
            raise BaselineError(self.refusal)
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise BaselineError(f"{key}: a baseline is text or an integer, not {value!r}")
        self._entries[key] = value
        try:
            self.persist()
        except OSError as exc:
            del self._entries[key]
            raise BaselineError(f"cannot store the baseline in {self.path}: {exc}") from exc
        return True

    def forget(self, keys: Iterable[str]) -> None:
        """Drop entries without writing anything (the setting vanished with its device)."""
        dropped = [key for key in keys if self._entries.pop(key, None) is not None]
        if dropped:
            self._persist_quietly()

    # -- restoring ----------------------------------------------------------------------------

    def restore(self, keys: Iterable[str], writer: RestoreWriter) -> dict[str, Exception | None]:
        """Write back the baseline of each of ``keys`` that has one, in the order given.

        Returns, per key restored or attempted, None when the value is back (its entry is dropped)
        or the exception the writer raised (the entry stays, to be tried again). Never stops at a
        failure: every other setting is still restored.
        """

        def attempt(key: str, value: BaselineValue) -> Exception | None:
            try:
                writer(key, value)
            except Exception as exc:
                log.warning("baseline.restore_failed", key=key, error=str(exc))
                return exc
            return None

        return self.restore_with(keys, attempt, lambda result: result is None)

    def restore_with(
        self,
        keys: Iterable[str],
        attempt: Callable[[str, BaselineValue], _Outcome],
        is_back: Callable[[_Outcome], bool],
    ) -> dict[str, _Outcome]:
        """Try to put back the baseline of each of ``keys`` that has one, in the order given.

        ``attempt(key, value)`` tries one setting and returns what came of it; ``is_back`` says
        whether that outcome has the setting at its recorded value. Returns the outcome per key
        attempted, in order; the entries that are back are dropped (and the record stored once),
        the others stay, to be tried again. Reporting the outcomes is the caller's. Never stops
        at a failure: an attempt that raises keeps its entry, is logged, and has no outcome.
        """
        outcomes: dict[str, _Outcome] = {}
        tried: set[str] = set()
        back: list[str] = []
        for key in keys:
            if key not in self._entries or key in tried:
                continue
            tried.add(key)
            try:
                outcome = attempt(key, self._entries[key])
            except Exception as exc:  # a bug in one attempt must not strand the others
                log.error("baseline.restore_raised", key=key, error=str(exc), exc_info=True)
                continue
            outcomes[key] = outcome
            if is_back(outcome):
                back.append(key)
                del self._entries[key]
        if back:
            self._persist_quietly()
        return outcomes

    def restore_all(self, writer: RestoreWriter) -> dict[str, Exception | None]:
        """Restore every entry, the last recorded first (undoing in reverse)."""
        return self.restore(reversed(list(self._entries)), writer)

    # -- storage ------------------------------------------------------------------------------

    def persist(self) -> None:
        """Replace the state file with the record, atomically; with no entries, remove it."""
        if not self._entries:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        body = json.dumps(
            {"format": _FORMAT, "bootId": self.boot_id, "settings": self._entries},
            indent=1,
        ).encode()
        # Unique even where every container's process is pid 1.
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self.state_dir)

    def _persist_quietly(self) -> None:
        try:
            self.persist()
        except OSError as exc:
            # The hardware is already where the record says; a stale file only repeats a restore.
            log.error("baseline.persist_failed", path=str(self.path), error=str(exc))


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _parse(text: str) -> tuple[str, dict[str, BaselineValue]]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        # Valid JSON nested past the interpreter's stack: it crashed the agent at start.
        raise ValueError("nested too deeply to be a baseline") from None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"expected an object with format {_FORMAT}")
    boot_id, settings = data.get("bootId"), data.get("settings")
    if not isinstance(boot_id, str) or not isinstance(settings, dict):
        raise ValueError("bootId must be text and settings an object")
    entries: dict[str, BaselineValue] = {}
    for key, value in settings.items():
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError(f"setting {key!r} holds {value!r}, not text or an integer")
        entries[key] = value
    return boot_id, entries
