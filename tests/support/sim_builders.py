"""Small hand-made clusters and workloads for the standalone simulator's tests."""

from __future__ import annotations

from joulie.api.inventory import parse_inventory
from joulie.sim.engine import Scenario
from joulie.sim.run_spec import RunSpec
from joulie.sim.scenario import DEFAULT_POLICY, scenario_of
from joulie.sim.trace import Workload

__all__ = ["TWO_GPU_NODES", "gpu_job", "small_scenario"]

TWO_GPU_NODES = parse_inventory(
    {
        "nodes": [
            {
                "node_name_prefix": "gpu",
                "replicas": 2,
                "vendor": "nvidia",
                "product": "NVIDIA H100 NVL",
                "cpu": "AMD EPYC 9654 96-Core Processor",
                "cpu_sockets": 2,
                "cpu_cores": 192,
                "memory_gib": 1536,
                "gpu_count": 8,
            }
        ]
    }
)
"""Two nodes of eight H100 NVL boards each."""


def small_scenario(workloads: list[Workload], baseline: str = "A", **overrides: object) -> Scenario:
    """``workloads`` on :data:`TWO_GPU_NODES`: no Joulie for baseline ``A``, else the manager's
    default policy (``overrides`` set any other Scenario field, a policy among them)."""
    base = scenario_of(RunSpec(inventory="exp02", hours=1.0))
    fields: dict[str, object] = {
        "name": "t",
        "baseline": baseline,
        "seed": 1,
        "inventory": TWO_GPU_NODES,
        "workloads": workloads,
        "catalog": base.catalog,
        "policy": None if baseline == "A" else DEFAULT_POLICY,
        **overrides,
    }
    return Scenario(**fields)  # type: ignore[arg-type]


def gpu_job(
    id: str, submit: float, gpus: int, priority: int = 0, pods: int = 1, **kw: object
) -> Workload:
    """A GPU-bound workload of ``pods`` pods of ``gpus`` whole NVIDIA boards each (90 % busy,
    8 CPUs, 64 GiB), an hour of work at full speed on the reference parts."""
    return Workload(
        id=id,
        submit_s=submit,
        work_s=3600.0,
        pods=pods,
        min_count=pods,
        priority=priority,
        cpu_millis=8000,
        memory_bytes=64 << 30,
        gpus=gpus,
        gpu_resource="nvidia.com/gpu",
        cpu_sensitivity=0.1,
        gpu_sensitivity=0.8,
        gpu_util=0.9,
        **kw,  # type: ignore[arg-type]
    )
