"""The one way the agent changes a setting on a node's hardware, and the one way it puts it back.

Every setting the agent writes (a RAPL limit, a cpufreq file, a GPU's power limit or clock lock,
whichever device it lives on) goes through :class:`GuardedWriter`, in this order:

1. **check** that the interface still reaches the device discovery found (NVML: the index still
   holds the UUID), then **read** the value in force;
2. **decide** (:func:`joulie.core.control.decide_write`): nothing is written when the setting
   already holds the target, nor when another writer changed the agent's own value since
   (``contended``, until the caller re-asserts), nor in a dry run; a setting that cannot be read
   is written only when the interface states what is in force without a reading (an NVML clock
   lock: unlocked), since otherwise it could not be put back;
3. **record** the value in force in the :class:`~joulie.agent.baseline.Baseline`, on disk, and
   write nothing when it cannot be stored;
4. **write**; when the interface refuses, the entry just recorded is dropped only while the
   setting still reads as before, so that a value the write changed after all is still put back;
5. **read back**: a different value is ``drift``, and the same drift at the next pass is reported
   again rather than taken for another writer.

Restoring reads, writes the recorded value unless it is already in force, and reads back. Every
result is a :class:`~joulie.api.enums.ControlResult` from
:func:`joulie.core.control.control_result`, the one mapping onto NodeTwin ``controlStatus``.

What differs between devices is only how a value is read, written and compared: a
:class:`Setting` says that, and turns its interface's errors into :class:`SettingFailed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as _with

import structlog

from joulie.agent.baseline import Baseline, BaselineError, BaselineValue
from joulie.agent.outcomes import SettingOutcome
from joulie.api.enums import ControlResult
from joulie.core.control import (
    ControlFacts,
    Failure,
    WriteDecision,
    control_result,
    decide_write,
    same_value,
)

__all__ = ["GuardedWriter", "Setting", "SettingFailed"]

log = structlog.get_logger("joulie.agent.guarded_write")

CANNOT_BE_READ_BACK = "cannot be read back"


class SettingFailed(Exception):
    """A check, read or write the interface did not carry out."""

    def __init__(self, detail: str, failure: Failure | None = Failure.OTHER) -> None:
        super().__init__(detail)
        self.detail = detail
        self.failure = failure
        """Why, as the result counts it; None: the device has no such setting (unsupported)."""


def _never_fails() -> None:
    return None


def _as_is(value: str) -> str:
    return value


@dataclass(frozen=True)
class Setting:
    """One setting of one device, as the guarded write sees it."""

    key: str
    """Its baseline key (for a file, its path on the node)."""
    read: Callable[[], str | None]
    """The value in force; None when the interface has no reading of it. Raises
    :class:`SettingFailed`."""
    write: Callable[[str], None]
    """Raises :class:`SettingFailed` when the interface refuses."""
    check: Callable[[], None] = _never_fails
    """Raises :class:`SettingFailed` when the interface no longer reaches the device discovery
    found; called before every read that leads to a write."""
    tolerance: int = 0
    """Largest integer difference that is still the same value (a RAPL limit reads back in the
    register's power unit; a GPU driver rounds its limit)."""
    unread_value: str | None = None
    """What is in force when :attr:`read` gives nothing, if the interface states it (NVML clock
    locks: unlocked, what every reboot and driver reload leaves); None: a setting that cannot be
    read is not written, since it could not be put back."""
    unread_detail: str = CANNOT_BE_READ_BACK
    """The detail of a write that cannot be read back, the same at the write and at every pass
    after it, so that a steady setting reports the same text."""
    show: Callable[[str], str] = _as_is
    """A value as a message shows it (a GPU limit in watts)."""
    recorded_as: Callable[[str], BaselineValue] = _as_is
    """A value as the baseline file keeps it (a GPU limit as a number)."""


class GuardedWriter:
    """Writes and restores the settings of one node with ``baseline`` kept.

    One per node and process: it remembers what it wrote to each key (to tell another writer
    from its own value) and what a drifting write read back.
    """

    def __init__(self, baseline: Baseline, *, dry_run: bool = False, name: str = "setting"):
        self.baseline = baseline
        self.dry_run = dry_run
        """Compute and report, write nothing and record nothing (SIMULATE_ONLY)."""
        self.name = name
        """What the log events say was written (``cpu``, ``gpu_cap``, ``gpu_clocks``)."""
        self._last_written: dict[str, str] = {}
        self._drifted: dict[str, str] = {}
        """Per key: what it read back after the agent's write was not kept (drift)."""

    # -- applying -----------------------------------------------------------------------------

    def apply(self, setting: Setting, target: str, *, reassert: bool = False) -> SettingOutcome:
        """Bring ``setting`` to ``target``: read, decide, record the baseline, write, read back."""
        key, tolerance = setting.key, setting.tolerance
        try:
            setting.check()
            observed = setting.read()
        except SettingFailed as exc:
            return SettingOutcome(
                key, _failed(exc, ControlFacts(target=target)), target, detail=exc.detail
            )
        last = self._last_written.get(key)
        drifted = self._drifted.get(key)
        if (
            not reassert
            and drifted is not None
            and same_value(last, target, tolerance)
            and same_value(observed, drifted, tolerance)
        ):
            # What the setting kept after this very write: the same drift, not another writer;
            # written again only when the caller re-asserts.
            shown = f"wrote {setting.show(target)}, reads {setting.show(drifted)}"
            return SettingOutcome(key, ControlResult.DRIFT, target, observed, observed, shown)
        facts = ControlFacts(
            target=target,
            observed=observed,
            last_written=last,
            reassert=reassert,
            tolerance=tolerance,
            dry_run=self.dry_run,
        )
        if observed is None:
            unread = self._unread(setting, target, last)
            if unread is not None:
                return unread
            decision = WriteDecision.WRITE
        else:
            decision = decide_write(target, observed, last, tolerance=tolerance, reassert=reassert)
        if decision is not WriteDecision.WRITE or self.dry_run:
            detail = "dry run"
            if decision is WriteDecision.CONTENDED:
                detail = f"changed by another writer to {_shown(setting, observed)}"
            elif decision is WriteDecision.EQUIVALENT:
                detail = ""
            return SettingOutcome(key, control_result(facts), target, observed, detail=detail)
        in_force = observed if observed is not None else setting.unread_value
        assert in_force is not None  # _unread stops a setting that states no unread value
        try:
            recorded = self.baseline.record(key, setting.recorded_as(in_force))
        except BaselineError as exc:
            result = control_result(_with(facts, failure=Failure.OTHER))
            return SettingOutcome(key, result, target, observed, detail=f"not written: {exc}")
        try:
            setting.write(target)
        except SettingFailed as exc:
            # Refused: the setting still holds the value just recorded, which restoring would
            # only try (and fail) to write again, unless the write changed it after all.
            if recorded and _reads_as(setting, observed):
                self.baseline.forget([key])
            log.warning(f"{self.name}.write_failed", key=key, value=target, error=exc.detail)
            return SettingOutcome(key, _failed(exc, facts), target, observed, detail=exc.detail)
        self._last_written[key] = target
        self._drifted.pop(key, None)
        read_back = _try_read(setting)
        result = control_result(_with(facts, written=True, read_back=read_back))
        detail = "" if read_back is not None else setting.unread_detail
        if result is ControlResult.DRIFT:
            assert read_back is not None
            detail = f"wrote {setting.show(target)}, reads {setting.show(read_back)}"
            log.warning(f"{self.name}.drift", key=key, wrote=target, reads=read_back)
            self._drifted[key] = read_back
        return SettingOutcome(key, result, target, observed, read_back, detail)

    def _unread(self, setting: Setting, target: str, last: str | None) -> SettingOutcome | None:
        """The outcome for a setting that gives no reading, or None to write it."""
        key = setting.key
        if setting.unread_value is None:
            why = "the value in force cannot be read, so it could not be put back"
            return SettingOutcome(
                key, ControlResult.NOT_APPLIED, target, detail=f"not written: {why}"
            )
        # In force is what the agent last wrote, else, when it never wrote it, what the
        # interface states; a baseline recorded by an earlier process leaves it unknown.
        assumed = last
        if assumed is None and key not in self.baseline:
            assumed = setting.unread_value
        if assumed != target:
            return None
        if last is not None:  # the agent's own write: as that write reported it
            return SettingOutcome(
                key, ControlResult.APPLIED_UNVERIFIED, target, detail=setting.unread_detail
            )
        return SettingOutcome(
            key, ControlResult.EQUIVALENT, target, detail="nothing of the agent's in force"
        )

    # -- restoring ----------------------------------------------------------------------------

    def restore(
        self, setting: Setting, value: str, *, held: Callable[[], str | None] | None = None
    ) -> SettingOutcome:
        """Put ``value`` (the recorded baseline) back on ``setting``.

        ``held``: asked only when a write would be needed; a reason returned means the device
        holds the setting itself so nothing of the agent's is in force (the kernel keeps EPP at
        ``performance`` under that governor), reported restored without a write.
        """
        key, tolerance = setting.key, setting.tolerance
        facts = ControlFacts(
            restoring=True, target=value, tolerance=tolerance, dry_run=self.dry_run
        )
        try:
            setting.check()
            observed = setting.read()
        except SettingFailed as exc:
            return SettingOutcome(key, _failed(exc, facts), value, detail=exc.detail)
        if observed is None and self._last_written.get(key) == value:
            observed = value  # no reading, but the agent's own last write was this value
        facts = _with(facts, observed=observed)
        if same_value(observed, value, tolerance) or self.dry_run:
            self._forget_written(key)
            return SettingOutcome(key, control_result(facts), value, observed)
        reason = held() if held is not None else None
        if reason is not None:
            self._forget_written(key)
            return SettingOutcome(key, ControlResult.RESTORED, value, observed, detail=reason)
        try:
            setting.write(value)
        except SettingFailed as exc:
            # The outcome says it; the caller logs what it could not put back.
            return SettingOutcome(key, _failed(exc, facts), value, observed, detail=exc.detail)
        self._forget_written(key)
        read_back = _try_read(setting)
        result = control_result(_with(facts, written=True, read_back=read_back))
        detail = ""
        if result is ControlResult.DRIFT:
            assert read_back is not None
            detail = f"wrote {setting.show(value)}, reads {setting.show(read_back)}"
        return SettingOutcome(key, result, value, observed, read_back, detail)

    def _forget_written(self, key: str) -> None:
        self._last_written.pop(key, None)
        self._drifted.pop(key, None)


def _failed(exc: SettingFailed, facts: ControlFacts) -> ControlResult:
    if exc.failure is None and not facts.restoring:
        return ControlResult.UNSUPPORTED
    # A setting the agent changed that is gone when it is put back is an error: its baseline
    # is kept, and the operator has something to look at.
    return control_result(_with(facts, failure=exc.failure or Failure.OTHER))


def _shown(setting: Setting, value: str | None) -> str:
    return "nothing readable" if value is None else setting.show(value)


def _try_read(setting: Setting) -> str | None:
    try:
        return setting.read()
    except SettingFailed:
        return None


def _reads_as(setting: Setting, before: str | None) -> bool:
    """Whether ``setting`` reads as it did before a refused write: the same value, or, for one
    that could not be read before (an NVML lock), still nothing readable."""
    try:
        now = setting.read()
    except SettingFailed:
        return False
    if now is None or before is None:
        return now is before
    return same_value(now, before, setting.tolerance)
