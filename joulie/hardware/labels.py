"""Hardware as a node's labels and annotations describe it (before any agent reports it).

Read by :mod:`joulie.hardware.recognition` only, so every role that recognises a node's models
reads the same keys in the same order: the exact-name annotation first, then Joulie's label,
then the labels of node feature discovery or the GPU vendors.
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


def _count(value: str | None) -> int | None:
    """A positive whole count from a label value, else None."""
    try:
        count = int(value) if value is not None else 0
    except ValueError:
        return None
    return count if count > 0 else None


def label_cpu_sockets(labels: Mapping[str, str]) -> int | None:
    """CPU sockets from the hardware label, else the NFD label; None when neither is a count."""
    return _count(labels.get(keys.HW_CPU_SOCKETS_LABEL)) or _count(
        labels.get(keys.NFD_CPU_SOCKETS_LABEL)
    )


def label_cpu_cores(labels: Mapping[str, str]) -> int | None:
    """Physical CPU cores of the node from the hardware label; None when absent or not a count."""
    return _count(labels.get(keys.HW_CPU_CORES_LABEL))
