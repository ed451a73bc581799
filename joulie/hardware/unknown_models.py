"""Hardware models the catalog does not know: which ones, on how many nodes, and whether this
process has said so already.

A node whose CPU or GPU model is not in the catalog is still simulated and planned, with generic
parts and a family named after the model, so nothing fails; without a word about it a typo in an
inventory, or a fleet of models the catalog lacks, would quietly change every energy figure. The
simulator, `joulie plan` and the controller manager all decide "unknown" here and warn once per
model (a GPU count with no model named is one model too). Pure: the callers print or log.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from joulie.hardware.catalog import Catalog, model_key
from joulie.hardware.recognition import HardwareView

__all__ = [
    "MAX_REMEMBERED",
    "WARNED",
    "Kind",
    "UnknownModel",
    "WarnedOnce",
    "unknown_models",
    "unknown_parts",
]

Kind = Literal["CPU", "GPU"]


@dataclass(frozen=True)
class UnknownModel:
    """One model the catalog does not know, and how many nodes have it."""

    kind: Kind
    model: str | None
    """The name as given (the first one seen, when several spellings read as one model); None
    when no model was given at all."""
    nodes: int

    @property
    def key(self) -> tuple[Kind, str]:
        """What makes two sightings one model: the kind and the name's key form (so
        ``Quantum Q9000`` and ``QUANTUM-Q9000`` are warned about once)."""
        return (self.kind, model_key(self.model) if self.model else "")

    def describe(self, done_as: str = "simulated") -> str:
        """One line for a user: ``GPU model 'X' is not in the hardware catalog (4 nodes):
        simulated as generic parts`` (``done_as`` is ``simulated`` or ``planned``)."""
        count = f"{self.nodes} node{'' if self.nodes == 1 else 's'}"
        if self.key[1]:
            what = f"{self.kind} model {self.model!r} is not in the hardware catalog"
        else:
            what = f"{self.kind} model not given"
        return f"{what} ({count}): {done_as} as generic parts"


def unknown_parts(view: HardwareView, catalog: Catalog) -> list[tuple[Kind, str | None]]:
    """The parts of a node's hardware that get generic figures: its CPU when the model is not a
    catalog key (or none was found), its GPUs likewise when it has any. The name is the view's
    (the reported raw name: a recognised model's is its catalog key)."""
    parts: list[tuple[Kind, str | None]] = []
    if view.cpu_model not in catalog.cpus:
        parts.append(("CPU", view.cpu_model))
    if view.gpu_count > 0 and view.gpu_model not in catalog.gpus:
        parts.append(("GPU", view.gpu_model))
    return parts


def unknown_models(seen: Iterable[tuple[Kind, str | None, int]]) -> list[UnknownModel]:
    """Sightings ``(kind, name, nodes)`` of unknown parts gathered into one entry per model,
    nodes added up, in the order the models were first seen."""
    found: dict[tuple[Kind, str], UnknownModel] = {}
    for kind, name, nodes in seen:
        model = UnknownModel(kind, name if name and name.strip() else None, nodes)
        before = found.get(model.key)
        if before is None:
            found[model.key] = model
        else:
            found[model.key] = UnknownModel(kind, before.model, before.nodes + nodes)
    return list(found.values())


MAX_REMEMBERED = 1024
"""Models a registry remembers. Node labels name them, so a cluster could name any number: past
this many, further unknown models are not warned about (the memory stays bounded, and a log
that already named a thousand models has made its point)."""


class WarnedOnce:
    """The models already warned about, by :attr:`UnknownModel.key` (at most MAX_REMEMBERED)."""

    def __init__(self) -> None:
        self._keys: set[tuple[Kind, str]] = set()
        self._lock = threading.Lock()

    def first_time(self, models: Iterable[UnknownModel]) -> list[UnknownModel]:
        """Those of ``models`` not warned about yet, now marked as warned about."""
        new: list[UnknownModel] = []
        with self._lock:
            for model in models:
                if model.key not in self._keys and len(self._keys) < MAX_REMEMBERED:
                    self._keys.add(model.key)
                    new.append(model)
        return new

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()


WARNED = WarnedOnce()
"""This process's registry (the controller manager's: one warning per model per process)."""
