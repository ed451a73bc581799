"""The accountant's per-node state as arrays, one slot per node of the readings (in the readings'
order): the last reading, the lowest reading, the idle draw measured while the node ran no
workload pod, the modelled idle draw, whether it runs workload pods now, and its split plan as
rows (:class:`PlanTable`). A reading is then split for every node at once
(``core.energy_split_arrays``): at steady state nothing runs per node in Python.

The slots follow the readings' node names: a node gone from a reading is forgotten (its
measurements with it), a new one starts with nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from joulie.core.energy_accounting import SplitPlan
from joulie.core.energy_split_arrays import (
    AccountSums,
    BoolArray,
    FloatArray,
    IndexArray,
    PlanRows,
    node_intervals,
    split_rows,
)
from joulie.manager.energy_plans import NodePlan, PlanInputs

__all__ = ["NodeTable", "PlanTable", "Split"]

_COMPACT_AT: Final = 1_024
"""Dead rows tolerated before a compaction, at the least (else as many as live ones)."""


def _moved(values: np.ndarray, old_of_new: IndexArray, fill: object) -> np.ndarray:
    """``values`` laid out in the new slots (``fill`` where a slot is new)."""
    out = np.full(old_of_new.size, fill, dtype=values.dtype)
    kept = old_of_new >= 0
    out[kept] = values[old_of_new[kept]]
    return out


class PlanTable:
    """Every node's split plan as rows. A node's rows are contiguous; a new plan appends its
    rows and zeroes the old ones (dead rows add nothing), and the table is compacted once dead
    rows outnumber live ones. Account keys are indexed in the order first seen; a compaction
    keeps only the keys of live rows."""

    def __init__(self, compact_at: int = _COMPACT_AT) -> None:
        self._compact_at = compact_at
        self.keys: list[str] = []
        self._index: dict[str, int] = {}
        self._size = 0
        self._live = 0
        self._node = np.zeros(0, dtype=np.intp)
        self._account = np.zeros(0, dtype=np.intp)
        self._shares = np.zeros((4, 0), dtype=np.float64)
        self._alive = np.zeros(0, dtype=np.bool_)
        self._start = np.zeros(0, dtype=np.intp)
        """Per slot, its first row."""
        self._count = np.zeros(0, dtype=np.intp)
        """Per slot, its rows (0: no plan, or a plan without accounts)."""

    def rows(self) -> PlanRows:
        n = self._size
        shares = self._shares
        return PlanRows(
            self._node[:n],
            self._account[:n],
            shares[0, :n],
            shares[1, :n],
            shares[2, :n],
            shares[3, :n],
        )

    def put(self, slot: int, plan: SplitPlan) -> None:
        self._kill(slot)
        accounts = plan.accounts
        if not accounts:
            return
        count = len(accounts)
        self._reserve(self._size + count)
        rows = slice(self._size, self._size + count)
        self._node[rows] = slot
        self._account[rows] = [self._account_index(a[0]) for a in accounts]
        self._shares[:, rows] = np.array([a[1:] for a in accounts], dtype=np.float64).T
        self._alive[rows] = True
        self._start[slot] = self._size
        self._count[slot] = count
        self._size += count
        self._live += count
        if self._size - self._live > max(self._compact_at, self._live):
            self._compact()

    def _account_index(self, key: str) -> int:
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.keys)
            self.keys.append(key)
        return found

    def relayout(self, old_of_new: IndexArray, new_of_old: IndexArray) -> None:
        """Follow the slots to a new layout (-1: a slot new, or a slot gone)."""
        for slot in np.flatnonzero(new_of_old < 0):
            self._kill(int(slot))
        n = self._size
        if n:
            # A dead row's slot may be gone: it points at slot 0 and adds nothing.
            node = new_of_old[self._node[:n]] if new_of_old.size else np.zeros(n, np.intp)
            self._node[:n] = np.where(self._alive[:n], node, 0)
        self._start = _moved(self._start, old_of_new, 0)
        self._count = _moved(self._count, old_of_new, 0)
        if self._live == 0:
            self._size = 0

    def _kill(self, slot: int) -> None:
        count = int(self._count[slot])
        if not count:
            return
        rows = slice(int(self._start[slot]), int(self._start[slot]) + count)
        self._shares[:, rows] = 0.0
        self._alive[rows] = False
        self._count[slot] = 0
        self._live -= count

    def _reserve(self, size: int) -> None:
        capacity = self._node.size
        if size <= capacity:
            return
        grown = max(size, 2 * capacity, 64)
        self._node = np.resize(self._node, grown)
        self._account = np.resize(self._account, grown)
        self._alive = np.resize(self._alive, grown)
        self._alive[capacity:] = False
        shares = np.zeros((4, grown), dtype=np.float64)
        shares[:, :capacity] = self._shares
        self._shares = shares

    def _compact(self) -> None:
        n = self._size
        kept = np.flatnonzero(self._alive[:n])
        position = np.full(n, -1, dtype=np.intp)
        position[kept] = np.arange(kept.size)
        used, accounts = np.unique(self._account[kept], return_inverse=True)
        self.keys = [self.keys[i] for i in used.tolist()]
        self._index = {key: i for i, key in enumerate(self.keys)}
        size = kept.size
        self._node[:size] = self._node[kept]
        self._account[:size] = accounts.reshape(-1)
        self._shares[:, :size] = self._shares[:, kept]
        self._shares[:, size:n] = 0.0
        self._alive[:size] = True
        self._alive[size:n] = False
        planned = self._count > 0
        self._start[planned] = position[self._start[planned]]
        self._size = self._live = size


@dataclass(frozen=True, slots=True)
class Split:
    """One reading's split, per account key."""

    sums: AccountSums
    keys: list[str]
    counted: bool
    """Whether any node's interval was counted."""


class NodeTable:
    """The per-node arrays (see the module docstring)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.slots: dict[str, int] = {}
        self.inputs: list[PlanInputs | None] = []
        self.plans = PlanTable()
        self._last_at: FloatArray = np.zeros(0)
        self._last_w: FloatArray = np.zeros(0)
        self._lowest: FloatArray = np.zeros(0)
        self._idle: FloatArray = np.zeros(0)
        """Measured while the node ran no workload pod (NaN: never seen so)."""
        self._modelled: FloatArray = np.zeros(0)
        """The model's idle draw under the node's controls (NaN: no model)."""
        self._empty: BoolArray = np.zeros(0, dtype=np.bool_)

    def follow(self, names: list[str]) -> list[str]:
        """Lay the slots out as ``names`` (a reading's nodes); returns the names new here."""
        if names == self.names:
            return []
        old = self.slots
        slots = {name: i for i, name in enumerate(names)}
        old_of_new = np.fromiter((old.get(n, -1) for n in names), dtype=np.intp, count=len(names))
        new_of_old = np.full(len(self.names), -1, dtype=np.intp)
        kept = np.flatnonzero(old_of_new >= 0)
        new_of_old[old_of_new[kept]] = kept
        nan = float("nan")
        self._last_at = _moved(self._last_at, old_of_new, nan)
        self._last_w = _moved(self._last_w, old_of_new, nan)
        self._lowest = _moved(self._lowest, old_of_new, nan)
        self._idle = _moved(self._idle, old_of_new, nan)
        self._modelled = _moved(self._modelled, old_of_new, nan)
        self._empty = _moved(self._empty, old_of_new, False)
        self.inputs = [self.inputs[i] if i >= 0 else None for i in old_of_new.tolist()]
        self.plans.relayout(old_of_new, new_of_old)
        self.names, self.slots = list(names), slots
        return [n for n in names if n not in old]

    def forget_readings(self) -> None:
        """The next reading starts each node afresh (a new term)."""
        self._last_at[:] = np.nan

    def set_plan(self, slot: int, planned: NodePlan, empty: bool) -> None:
        self.inputs[slot] = planned.inputs
        self.plans.put(slot, planned.plan)
        modelled = planned.modelled_idle_w
        self._modelled[slot] = modelled if modelled is not None else np.nan
        self._empty[slot] = empty

    def set_empty(self, slot: int, empty: bool) -> None:
        self._empty[slot] = empty

    def close(self, at: float, watts: FloatArray, max_gap: float) -> Split:
        """Take the reading's ``watts`` (in slot order; NaN: a failed read) at ``at`` and split
        the intervals it closes."""
        closed = node_intervals(at, watts, self._last_at, self._last_w, max_gap)
        fresh = closed.fresh
        self._last_at[fresh] = at
        self._last_w[fresh] = watts[fresh]
        self._lowest[fresh] = np.fmin(self._lowest[fresh], watts[fresh])
        idle_now = fresh & self._empty
        self._idle[idle_now] = np.fmin(self._idle[idle_now], watts[idle_now])
        # Measured while empty, else the model's, else the lowest reading (which overstates it
        # on a node never seen idle).
        idle_w = np.where(
            np.isnan(self._idle),
            np.where(np.isnan(self._modelled), self._lowest, self._modelled),
            self._idle,
        )
        idle_w = np.where(closed.counted, idle_w, 0.0)
        plans = self.plans
        sums = split_rows(closed.energy_j, closed.seconds, idle_w, plans.rows(), len(plans.keys))
        return Split(sums, plans.keys, bool(closed.counted.any()))
