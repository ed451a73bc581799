"""Hardware families: the groups the per-family performance split shares slots between.

A node with GPUs belongs to the family of its GPU model (the GPUs dominate its power and what it
is wanted for); a CPU-only node belongs to the family of its CPU model. Callers pass catalog keys
when the model was recognised and the raw reported name otherwise, so unrecognised hardware still
forms a family of its own instead of being lumped together with other unknowns. Both are written
in the catalog's key form (:func:`joulie.hardware.catalog.model_key`), so an unknown model reads
like a known one (``cpu:UNKNOWN_9000``, not ``cpu:Unknown CPU 9000``).
"""

from __future__ import annotations

from joulie.hardware.catalog import model_key

__all__ = ["UNKNOWN_CPU", "UNKNOWN_GPU", "hardware_family"]

UNKNOWN_GPU = "unknown-gpu"
UNKNOWN_CPU = "unknown-cpu"


def hardware_family(cpu_model: str | None, gpu_model: str | None, gpu_count: int) -> str:
    """``gpu:<gpu model key>`` for a node with GPUs, else ``cpu:<cpu model key>``.

    A missing or blank model name becomes ``unknown-gpu`` / ``unknown-cpu``: a node whose GPU
    could not be identified still counts as a GPU node and never joins a CPU-only family.
    """
    if gpu_count > 0:
        return f"gpu:{_or(gpu_model, UNKNOWN_GPU)}"
    return f"cpu:{_or(cpu_model, UNKNOWN_CPU)}"


def _or(model: str | None, fallback: str) -> str:
    key = model_key(model) if model is not None else ""
    return key or fallback
