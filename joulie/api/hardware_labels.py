"""Hardware as a node's labels and annotations describe it (before any agent reports it).

The simulator and the controller manager read the same keys in the same order, so a node's
models resolve the same way in both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from joulie.api import keys


def _first(*values: str | None) -> str | None:
    """The first non-blank value."""
    return next((v for v in values if v and v.strip()), None)


def label_cpu_model(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """The raw CPU model: the exact annotation, else the (label-safe) hardware or NFD label."""
    return _first(
        annotations.get(keys.HW_CPU_MODEL_ANNOTATION),
        labels.get(keys.HW_CPU_MODEL_LABEL),
        labels.get(keys.NFD_CPU_MODEL_LABEL),
    )


def label_gpu_model(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> str | None:
    """The raw GPU model: the exact annotation, else the hardware label, else the first GPU
    product label the node carries."""
    product = next((labels[k] for k in product_label_keys if labels.get(k)), None)
    return _first(
        annotations.get(keys.HW_GPU_MODEL_ANNOTATION), labels.get(keys.HW_GPU_MODEL_LABEL), product
    )
