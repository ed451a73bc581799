"""The whole NodeHardware status an agent on real hardware would publish, from discovery over
fake kernel trees and a fake NVML: valid against the CRD, with capabilities and an overall
quality that says how well the node was recognised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from joulie.agent.cpu_discovery import discover_cpu
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.discovery import discover_gpus
from joulie.agent.hardware_status import node_hardware_status
from joulie.api.base import ObjectMeta
from joulie.api.crd import NODE_HARDWARE_CRD, crd_manifest
from joulie.api.enums import DiscoveryQuality
from joulie.api.nodehardware import NodeHardware, NodeHardwareSpec
from joulie.hardware.catalog import Catalog
from tests.structural import schema_errors
from tests.support import sysfs_trees as trees
from tests.support.fake_nvml import normal_node

CATALOG = Catalog.load()
SCHEMA: dict[str, Any] = crd_manifest(NODE_HARDWARE_CRD)["spec"]["versions"][0]["schema"][
    "openAPIV3Schema"
]


def published(status: Any) -> dict[str, Any]:
    return NodeHardware(
        metadata=ObjectMeta(name="node-a"), spec=NodeHardwareSpec(node_name="node-a"), status=status
    ).to_wire()


def test_an_intel_gpu_node_is_recognised_exactly(tmp_path: Path) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    nvml = normal_node(4, "h100")
    nvml.init()
    status = node_hardware_status(
        discover_cpu(fake), discover_gpus(GpuBackends.of(fake, nvml)), CATALOG
    )
    assert schema_errors(SCHEMA, published(status)) == []
    assert status.quality is not None
    assert status.quality.overall is DiscoveryQuality.EXACT
    assert status.capabilities is not None
    assert status.capabilities.cpu_control is True
    assert status.capabilities.gpu_control is True
    assert status.gpu is not None
    assert status.gpu.count == 4
    assert status.cpu is not None
    assert status.cpu.sockets == 2


def test_a_vm_is_published_without_control(tmp_path: Path) -> None:
    fake = trees.vm_without_power_interfaces(tmp_path)
    status = node_hardware_status(
        discover_cpu(fake), discover_gpus(GpuBackends.of(fake, None)), CATALOG
    )
    assert schema_errors(SCHEMA, published(status)) == []
    assert status.capabilities is not None
    assert status.capabilities.cpu_control is False
    assert status.capabilities.gpu_control is False
    assert status.gpu is not None
    assert status.gpu.present is False
    assert status.quality is not None
    # The VM names a CPU family, not a model the catalog knows: heuristic, and the reason listed.
    assert status.quality.overall is DiscoveryQuality.HEURISTIC
    assert status.quality.warnings == [
        "CPU model 'Intel(R) Xeon(R) Processor' is not in the hardware catalog"
    ]
