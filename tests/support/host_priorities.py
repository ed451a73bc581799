"""Prioritize answers as kube-scheduler reads them: a HostPriorityList names only the nodes
scored above the lowest score, each by how much (``joulie.extender.wire.prioritize_response``),
and kube-scheduler adds 0 for a node it leaves out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def above_lowest(names: Sequence[str], scores: Sequence[int]) -> list[dict[str, Any]]:
    """The answer for ``scores``, as a decoded HostPriorityList."""
    lowest = min(scores, default=0)
    return [
        {"Host": n, "Score": s - lowest} for n, s in zip(names, scores, strict=True) if s > lowest
    ]


def as_scheduler_adds(names: Sequence[str], answer: bytes | list[dict[str, Any]]) -> list[int]:
    """What each of ``names`` gets from the answer in kube-scheduler's sum: its listed score,
    else 0 (a name not asked about fails)."""
    entries = json.loads(answer) if isinstance(answer, bytes) else answer
    listed = {entry["Host"]: entry["Score"] for entry in entries}
    assert set(listed) <= set(names), set(listed) - set(names)
    return [listed.get(n, 0) for n in names]
