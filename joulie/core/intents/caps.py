"""The CPU and GPU power caps of a node at a profile: the GPU model's range, resolved and
clamped."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import TypeVar

from joulie.api.enums import (
    GpuCapScope,
    Profile,
)
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.nodetwin import (
    CpuSpec,
    GpuPowerCap,
)
from joulie.core.intents.config import (
    _MIN_WATTS,
    CapRange,
    IntentConfig,
)

_V = TypeVar("_V")


_FOLD = re.compile(r"[^0-9a-z]+")


def _fold(name: str) -> str:
    return _FOLD.sub(" ", name.casefold()).strip()


def lookup_model(candidates: Iterable[str | None], entries: Mapping[str, _V]) -> _V | None:
    """The entry for the first candidate name that matches a key: exactly, else ignoring case and
    separators (``NVIDIA-H100-NVL`` == ``nvidia h100 nvl`` == ``NVIDIA_H100_NVL``).

    Exact matches of any candidate win over folded ones; among keys folding alike, the smallest
    key wins, so the result never depends on the order of a JSON object.
    """
    names = [name for name in candidates if name]
    if not names or not entries:
        return None
    for name in names:
        if name in entries:
            return entries[name]
    folded: dict[str, str] = {}
    for key in sorted(entries):
        folded.setdefault(_fold(key), key)
    for name in names:
        match = folded.get(_fold(name))
        if match is not None:
            return entries[match]
    return None


def gpu_product_label(labels: Mapping[str, str], keys: Iterable[str]) -> str | None:
    """The value of the first of ``keys`` the node carries with a non-empty value."""
    for key in keys:
        value = labels.get(key)
        if value:
            return value
    return None


def _usable(low: float | None, high: float | None) -> CapRange | None:
    if high is None or high < _MIN_WATTS:
        return None
    low = _MIN_WATTS if low is None else max(low, _MIN_WATTS)
    return (low, high) if low <= high else None


def gpu_cap_range(
    hardware: NodeHardwareStatus | None,
    catalog_gpu_range: CapRange | None,
    product_label: str | None,
    model_caps: Mapping[str, CapRange],
) -> CapRange | None:
    """The per-GPU power-limit range to resolve watts against, from the first source that has one:
    NodeHardware ``status.gpu.capRangePerGpu``, the catalog entry of the recognised GPU model
    (``(min_w, max_w)``), GPU_MODEL_CAPS_JSON by product label. A range without a usable maximum
    or with its minimum above its maximum is skipped."""
    gpu = hardware.gpu if hardware is not None else None
    if gpu is not None and gpu.cap_range_per_gpu is not None:
        found = _usable(gpu.cap_range_per_gpu.min_watts, gpu.cap_range_per_gpu.max_watts)
        if found is not None:
            return found
    if catalog_gpu_range is not None:
        found = _usable(*catalog_gpu_range)
        if found is not None:
            return found
    entry = lookup_model([product_label], model_caps)
    return _usable(*entry) if entry is not None else None


def gpu_cap_watts(pct_of_max: float, cap_range: CapRange) -> float:
    """``pct_of_max`` of the range's maximum, clamped to the range, in whole watts (half up) that
    stay inside the range; a range narrower than a whole watt keeps the exact clamped value."""
    low, high = max(cap_range[0], _MIN_WATTS), cap_range[1]
    exact = min(max(pct_of_max / 100.0 * high, low), high)
    whole = float(math.floor(exact + 0.5))
    if whole < low:
        whole = float(math.ceil(low))
    if whole > high:
        whole = float(math.floor(high))
    return whole if low <= whole <= high else exact


def _cpu_pct(profile: Profile, config: IntentConfig) -> float:
    if profile == Profile.PERFORMANCE:
        return config.cpu_performance_cap_pct_of_max
    return config.cpu_eco_cap_pct_of_max


def _gpu_pct(profile: Profile, config: IntentConfig) -> float:
    if profile == Profile.PERFORMANCE:
        return config.gpu_performance_cap_pct_of_max
    return config.gpu_eco_cap_pct_of_max


def cpu_power_cap(
    profile: Profile, gpu_node: bool, hardware: NodeHardwareStatus | None, config: IntentConfig
) -> CpuSpec:
    """The CPU cap of a node running at ``profile`` (the guard's control profile).

    A CPU-only node gets the percentage of its profile. A GPU node's CPU gets PERFORMANCE_CAP_WATTS
    whatever the profile, except with CPU_ECO_CAP_ON_UNCAPPABLE_GPU_NODES when its NodeHardware
    says the GPUs have no power control: then it is capped like a CPU-only node.
    """
    if gpu_node and not (config.cpu_eco_cap_on_uncappable_gpu_nodes and _gpus_uncappable(hardware)):
        return CpuSpec(package_power_cap_watts=config.performance_cap_watts)
    return CpuSpec(package_power_cap_pct_of_max=_cpu_pct(profile, config))


def _gpus_uncappable(hardware: NodeHardwareStatus | None) -> bool:
    return (
        hardware is not None
        and hardware.gpu is not None
        and hardware.gpu.control_available is False
    )


def gpu_power_cap(
    profile: Profile,
    hardware: NodeHardwareStatus | None,
    product_label: str | None,
    catalog_gpu_range: CapRange | None,
    config: IntentConfig,
) -> GpuPowerCap:
    """The per-GPU cap of a GPU node running at ``profile``: the percentage always, and the watts
    it resolves to when a power-limit range is known (:func:`gpu_cap_range`)."""
    pct = _gpu_pct(profile, config)
    cap_range = gpu_cap_range(hardware, catalog_gpu_range, product_label, config.gpu_model_caps)
    return GpuPowerCap(
        scope=GpuCapScope.PER_GPU,
        cap_pct_of_max=pct,
        cap_watts_per_gpu=gpu_cap_watts(pct, cap_range) if cap_range is not None else None,
    )
