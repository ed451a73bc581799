"""What one control attempt on a node's hardware amounts to, as NodeTwin.status.controlStatus says.

The agent changes a setting (a RAPL limit, a governor, a GPU power limit) in three steps: decide
whether to write, write, read back. This module is the pure part of each step, shared by every
backend (sysfs, NVML, the simulator's HTTP service), so that a result means the same thing
whichever device produced it. The meanings, one each:

* ``applied``: the agent wrote the value and reading it back shows it (within the device's
  tolerance).
* ``applied-unverified``: the agent wrote the value but could not read it back (the interface has
  no reading, or the read failed); the write itself was accepted.
* ``equivalent``: the setting already held the requested value; nothing was written.
* ``unsupported``: this node has no such control (no file, no capability, a preset it cannot
  express); nothing was written.
* ``not-applied``: the control exists, but the agent wrote nothing by its own decision and nothing
  failed: a dry run (``SIMULATE_ONLY``), a device that states no range to clamp the value to, or
  no value asked for.
* ``refused``: the kernel or driver denied the write for lack of permission (EACCES/EPERM/EROFS, a
  limit locked by the BIOS, NVML NO_PERMISSION).
* ``drift``: the agent wrote a value and reading it back shows a different one.
* ``contended``: another writer changed the setting since the agent's last write (it holds neither
  what the agent wrote nor what is asked); the agent backs off instead of fighting every tick.
* ``disabled``: control of this component is switched off on the agent (``GOVERNOR_WRITES`` false);
  nothing was written and nothing of the agent's is in force.
* ``restored``: control was withdrawn and the setting is back at the value the agent recorded
  before its first write: read back equal, already equal, or written where nothing can be read.
* ``error``: anything else went wrong (the value was rejected, an I/O error, unreadable contents,
  the baseline could not be stored so nothing was written).

Values compare as text, or as integers within a tolerance when both sides are integers (a RAPL
limit reads back in the register's coarse power unit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from joulie.api.enums import ControlResult

__all__ = [
    "ControlFacts",
    "Failure",
    "WriteDecision",
    "combine_results",
    "control_result",
    "decide_write",
    "same_value",
]

Value = str | int


class Failure(StrEnum):
    """Why a write, or the read before it, did not go through."""

    PERMISSION = "permission"
    """Denied: locked by the BIOS, a read-only mount, a capability the agent lacks."""
    REJECTED = "rejected"
    """The interface refused the value (EINVAL, EBUSY, NVML INVALID_ARGUMENT)."""
    OTHER = "other"
    """Any other failure (I/O, unreadable contents, the baseline could not be persisted)."""


class WriteDecision(StrEnum):
    WRITE = "write"
    """Write the target."""
    EQUIVALENT = "equivalent"
    """The setting already holds the target; write nothing."""
    CONTENDED = "contended"
    """Another writer changed the setting since the agent wrote this same target; back off."""


def same_value(a: Value | None, b: Value | None, tolerance: int = 0) -> bool:
    """Whether two readings of a setting are the same value (None: unknown, never the same)."""
    if a is None or b is None:
        return False
    ia, ib = _as_int(a), _as_int(b)
    if ia is not None and ib is not None:
        return abs(ia - ib) <= max(tolerance, 0)
    return str(a).strip() == str(b).strip()


def _as_int(value: Value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(value.strip())
    except ValueError:
        return None


def decide_write(
    target: Value,
    observed: Value | None,
    last_written: Value | None,
    *,
    tolerance: int = 0,
    reassert: bool = False,
) -> WriteDecision:
    """Whether to write ``target`` over the ``observed`` value.

    ``last_written`` is what the agent itself wrote to this setting last (None: nothing, or not
    since the process started). When the agent wants the same target again and the setting no
    longer holds it, someone else changed it: that is contention, and the agent writes again only
    when the caller says its back-off has passed (``reassert``). A new target is always written.
    """
    if same_value(observed, target, tolerance):
        return WriteDecision.EQUIVALENT
    if (
        not reassert
        and last_written is not None
        and same_value(last_written, target, tolerance)
        and not same_value(observed, last_written, tolerance)
    ):
        return WriteDecision.CONTENDED
    return WriteDecision.WRITE


@dataclass(frozen=True)
class ControlFacts:
    """Everything known about one attempt on one setting; every field has a neutral default."""

    requested: bool = True
    """The spec asks for a value here (or a restore is under way)."""
    enabled: bool = True
    """Control of this component is switched on at the agent."""
    supported: bool = True
    """The node has this control."""
    restoring: bool = False
    """The attempt puts the baseline back rather than applying a spec value."""
    dry_run: bool = False
    """Compute only, write nothing (``SIMULATE_ONLY``)."""
    declined: bool = False
    """The agent chose not to write for safety (no device range to clamp to)."""
    target: Value | None = None
    """The value wanted (after clamping), or the baseline value when restoring."""
    observed: Value | None = None
    """The value read before the attempt (None: unknown)."""
    last_written: Value | None = None
    """What the agent itself last wrote to this setting (None: nothing known)."""
    reassert: bool = False
    """The back-off after contention has passed: write again."""
    written: bool = False
    """A write was issued and the interface accepted it."""
    failure: Failure | None = None
    """Why the write (or the read that must precede it) failed."""
    read_back: Value | None = None
    """The value read after the write (None: no reading)."""
    tolerance: int = 0
    """Largest integer difference that still counts as the same value."""


def control_result(facts: ControlFacts) -> ControlResult:
    """The controlStatus value of one attempt. Total: every combination of facts has one."""
    f = facts
    if not f.restoring:
        if not f.enabled:
            return ControlResult.DISABLED
        if not f.requested:
            return ControlResult.NOT_APPLIED
        if not f.supported:
            return ControlResult.UNSUPPORTED
    if f.failure is Failure.PERMISSION:
        return ControlResult.REFUSED
    if f.failure is not None:
        return ControlResult.ERROR
    if f.written:
        if f.target is None or f.read_back is None:
            return ControlResult.RESTORED if f.restoring else ControlResult.APPLIED_UNVERIFIED
        if not same_value(f.read_back, f.target, f.tolerance):
            return ControlResult.DRIFT
        return ControlResult.RESTORED if f.restoring else ControlResult.APPLIED
    # Nothing was written.
    if f.target is not None and same_value(f.observed, f.target, f.tolerance):
        return ControlResult.RESTORED if f.restoring else ControlResult.EQUIVALENT
    if f.restoring or f.dry_run or f.declined:
        return ControlResult.NOT_APPLIED
    if (
        f.target is not None
        and decide_write(
            f.target, f.observed, f.last_written, tolerance=f.tolerance, reassert=f.reassert
        )
        is WriteDecision.CONTENDED
    ):
        return ControlResult.CONTENDED
    # The agent wrote nothing and nothing failed: by its own decision.
    return ControlResult.NOT_APPLIED


# Most telling first: when one component spans several settings (two RAPL packages, governor and
# EPP of every policy), the component reports the first of these that any setting has, so a
# failure is never hidden behind a success elsewhere.
_PRECEDENCE: tuple[ControlResult, ...] = (
    ControlResult.ERROR,
    ControlResult.REFUSED,
    ControlResult.DRIFT,
    ControlResult.CONTENDED,
    ControlResult.NOT_APPLIED,
    ControlResult.APPLIED_UNVERIFIED,
    ControlResult.APPLIED,
    ControlResult.RESTORED,
    ControlResult.EQUIVALENT,
    ControlResult.UNSUPPORTED,
    ControlResult.DISABLED,
)


def combine_results(results: Iterable[ControlResult]) -> ControlResult | None:
    """One result for a component from those of its settings (None when there are none)."""
    present = set(results)
    for result in _PRECEDENCE:
        if result in present:
            return result
    return None
