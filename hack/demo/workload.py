"""The demo's embedded workload: when each pod is submitted and what it asks for.

Times are fractions of the run and durations are simulated minutes, so the same workload plays
out whatever DEMO_DURATION and the time scale are. Standard batch work arrives all along; two
waves of performance pods and one gang of four (a distributed training job: four performance
pods that only make sense together) arrive in the middle, so the manager has to grow the
performance share and give it back afterwards. Seeded: every run submits the same pods.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hack.cluster.stages import RUN_DURATION_ANNOTATION
from joulie.api import keys

GANG_LABEL = "joulie.io/demo-gang"
"""Marks the pods of the demo's gang (gang scheduling itself comes with PodGroup support)."""


@dataclass(frozen=True)
class DemoPod:
    at: float
    """When to submit it, as a fraction of the run (0 to 1)."""
    name: str
    performance: bool
    cpu: int
    """Cores requested."""
    gpus: int
    minutes: float
    """How long it runs, in simulated minutes."""
    utilization: float
    """The share of its request it keeps busy (drives the simulator's power)."""
    gang: str = ""

    def manifest(self, namespace: str, time_scale: float) -> dict[str, Any]:
        """The Pod; its run duration in wall-clock seconds, as KWOK plays it."""
        seconds = max(1, round(self.minutes * 60 / time_scale))
        requests = {"cpu": str(self.cpu), "memory": f"{self.cpu * 4}Gi"}
        if self.gpus:
            requests["nvidia.com/gpu"] = str(self.gpus)
        annotations = {
            keys.WORKLOAD_CLASS_ANNOTATION: "performance" if self.performance else "standard",
            keys.SIM_CPU_UTILIZATION_ANNOTATION: f"{self.utilization:.2f}",
            keys.SIM_GPU_UTILIZATION_ANNOTATION: f"{self.utilization:.2f}",
            RUN_DURATION_ANNOTATION: f"{seconds}s",
        }
        labels = {"app.kubernetes.io/part-of": "joulie-demo"}
        if self.gang:
            labels[GANG_LABEL] = self.gang
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {
                "containers": [
                    {
                        "name": "work",
                        "image": "registry.example/joulie-demo:1",
                        "resources": {"requests": requests, "limits": dict(requests)},
                    }
                ],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
            },
        }


def workload(seed: int = 7) -> list[DemoPod]:
    """Every pod of the demo, in submission order."""
    rng = random.Random(seed)
    pods: list[DemoPod] = []
    for i in range(48):
        pods.append(
            DemoPod(
                at=i / 48 * 0.85,
                name=f"batch-{i:02d}",
                performance=False,
                cpu=rng.choice((16, 24, 32, 48)),
                gpus=rng.choice((0, 0, 1, 2)),
                minutes=rng.uniform(20, 60),
                utilization=rng.uniform(0.5, 0.9),
            )
        )
    for wave, start in enumerate((0.25, 0.5)):
        for i in range(10):
            pods.append(
                DemoPod(
                    at=start + i * 0.01,
                    name=f"serve-{wave}-{i:02d}",
                    performance=True,
                    cpu=rng.choice((32, 48, 64)),
                    gpus=rng.choice((1, 2, 4)),
                    minutes=rng.uniform(30, 50),
                    utilization=rng.uniform(0.7, 0.95),
                )
            )
    for i in range(4):
        pods.append(
            DemoPod(
                at=0.4,
                name=f"train-{i}",
                performance=True,
                cpu=64,
                gpus=4,
                minutes=45,
                utilization=0.9,
                gang="train",
            )
        )
    return sorted(pods, key=lambda p: (p.at, p.name))
